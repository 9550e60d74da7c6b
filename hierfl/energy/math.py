"""Device energy: joules of local training (per FLOP) and of model transfers (per bit and per second on air).

Pure math (no torch, no Ray). The driver charges every finished training job and every model
transfer of a device to an :class:`EnergyLedger` (``hierfl.energy.driver``); the scenario's
``energy:`` section sets the figures (docs/explanation/energy.md).

* **Training**: ``E_cmp = J/FLOP(tier) × FLOPs``, ``FLOPs = 3 × F_fwd × samples processed``
  (training ≈ 3 × forward, the same rule the tiers' GFLOP/s use, DEVICE_TIERS.md).
* **Transfers** (Huang et al., "A Close Examination of Performance and Power Characteristics of 4G
  LTE Networks", MobiSys 2012, §5 power model): a radio moving data draws
  ``P = α_u·t_u + α_d·t_d + β`` (mW; ``t`` throughput in Mbit/s), so a transfer of ``b`` bits that
  keeps the radio on for ``s`` seconds costs ``α·b/10⁶ + β·s`` mJ. The ``α`` term is the energy per
  bit (the same wherever the bits go); the ``β`` term charges the time on air, so a slow path (a
  WAN-priced device–cloud route, a shared bottleneck) costs the device more energy for the same
  bits — the premise of the energy claim of Liu et al., ICC 2020. The radio's tail after a
  burst (Huang et al. §5: LTE ≈ 11.6 s at ≈ 1 W) is not charged [D]: it depends on the phone's
  timers, not on the protocol.
* **Other work on a device** (:meth:`EnergyLedger.work`): a secure-aggregation sub-protocol's crypto
  operations and mask arithmetic, a transfer channel's encoding and decoding, differential privacy's
  clipping and local noise — work the emulator charges in seconds on the device — costs those seconds at
  the device's active power ``P = J/FLOP(tier) × FLOP/s``, the power its training draws
  (``FLOP/s = speed_sps × 3 × F_fwd``, the device's training throughput). For work timed in FLOPs at
  the device's FLOP/s this is ``J/FLOP × FLOPs``, training's own rule; for crypto timed at a tier's
  measured rates (ms per key agreement, MB/s of AES) it assumes the CPU draws the same power on them [D].
  DP-SGD's per-sample work is part of the training job's work (its work factor), so training charges it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RadioPower", "RADIO_DEFAULTS", "J_PER_FLOP_DEFAULTS", "CUSTOM_TIER", "job_flops", "compute_j",
           "transfer_j", "work_j", "EnergyLedger"]

CUSTOM_TIER = "custom"
"""The tier name of devices drawn from distributions (no ``devices.tiers``)."""


@dataclass(frozen=True)
class RadioPower:
    """Huang et al.'s linear power model of one link type: mW per Mbit/s up and down, and base mW."""

    up_mw_per_mbps: float
    down_mw_per_mbps: float
    base_mw: float


# Link types as hierfl/profiles/tiers.yaml names them (`link:`), plus 3g.
# Huang et al. MobiSys 2012, Table 4 (LTE, 3G and Wi-Fi fitted on an HTC phone):
#   LTE  α_u 438.39, α_d 51.97, β 1288.04;  3G α_u 868.98, α_d 122.12, β 817.88;
#   WiFi α_u 283.17, α_d 137.01, β 132.86   (mW/Mbps, mW/Mbps, mW)
RADIO_DEFAULTS: dict[str, RadioPower] = {
    "4g": RadioPower(438.39, 51.97, 1288.04),         # [Huang12] LTE
    "3g": RadioPower(868.98, 122.12, 817.88),         # [Huang12]
    "wifi_fixed": RadioPower(283.17, 137.01, 132.86),  # [Huang12] Wi-Fi
    "5g": RadioPower(438.39, 51.97, 1288.04),         # [D] placeholder: LTE's figures (no 5G fit in [Huang12])
    "ethernet_fixed": RadioPower(0.0, 0.0, 0.0),      # [D] placeholder: a wired NIC's energy is not charged
    "backhaul": RadioPower(0.0, 0.0, 0.0),            # [D] placeholder: servers' links are not device energy
}

# Training energy per FLOP = sustained training power ÷ the tier's training GFLOP/s (DEVICE_TIERS.md).
# Every power figure is our choice [D] from public datasheets / measurements named here:
J_PER_FLOP_DEFAULTS: dict[str, float] = {
    "rpi4": 6.4 / 15e9,               # [D] Raspberry Pi 4 B under full CPU load ≈ 6.4 W (community power measurements)
    "jetson_nano": 10.0 / 100e9,      # [D] NVIDIA Jetson Nano 10 W power mode (datasheet: 5 W / 10 W)
    "jetson_orin_nano": 15.0 / 500e9,  # [D] Jetson Orin Nano 7–15 W (datasheet), top mode
    "phone_low": 3.0 / 2e9,           # [D] phone SoC sustained ≈ 3 W (placeholder)
    "phone_high": 5.0 / 10e9,         # [D] flagship SoC sustained ≈ 5 W (placeholder)
    "laptop": 45.0 / 150e9,           # [D] 45 W laptop CPU package (placeholder)
    "edge_gpu": 70.0 / 3500e9,        # [D] NVIDIA T4 TDP 70 W (datasheet)
    "edge_cpu": 150.0 / 400e9,        # [D] placeholder
    "cloud_gpu": 70.0 / 3500e9,       # [D] placeholder, as edge_gpu
    "cloud_cpu": 150.0 / 400e9,       # [D] placeholder, as edge_cpu
    CUSTOM_TIER: 5e-10,               # [D] devices without a tier: a phone-class 0.5 nJ/FLOP
}


def job_flops(samples: int, forward_flops: float) -> float:
    """FLOPs of one training job: ``3 × F_fwd × samples`` (forward + backward ≈ 3 forwards)."""
    return 3.0 * float(forward_flops) * float(samples)


def compute_j(flops: float, j_per_flop: float) -> float:
    """Joules of ``flops`` of training at ``j_per_flop``."""
    return float(flops) * float(j_per_flop)


def transfer_j(radio: RadioPower, bits: float, seconds: float, upload: bool) -> float:
    """Joules a device's radio spends moving ``bits`` (``upload``: sent, else received) while on air ``seconds``."""
    alpha = radio.up_mw_per_mbps if upload else radio.down_mw_per_mbps
    return (alpha * float(bits) / 1e6 + radio.base_mw * float(seconds)) / 1000.0


def work_j(seconds: float, active_w: float) -> float:
    """Joules of ``seconds`` of work at ``active_w`` watts (the device's power while it trains)."""
    return float(seconds) * float(active_w)


class EnergyLedger:
    """Per-device energy of one run: training and transfer joules, and the run's totals in ``counters``.

    ``j_per_flop`` (N,), ``radios`` (N,) per device; ``forward_flops`` of the model per sample, one
    number, or (N,) per device when devices run different models (``models:``).
    ``counters`` is the run's counter dict: ``energy_device_j`` (= compute + comm),
    ``energy_compute_j`` and ``energy_comm_j`` are kept there so every evaluation line carries the
    energy spent up to it (the cost to a target, like ``compute_s``).
    """

    KEYS = ("energy_device_j", "energy_compute_j", "energy_comm_j")

    def __init__(self, j_per_flop: np.ndarray, radios: list[RadioPower], forward_flops: float | np.ndarray,
                 counters: dict[str, float], speed_sps: np.ndarray | None = None) -> None:
        n = len(radios)
        self.j_per_flop = np.asarray(j_per_flop, dtype=np.float64)
        self.radios = radios
        self.forward_flops = np.broadcast_to(np.asarray(forward_flops, dtype=np.float64), (n,))
        # each device's active power: J/FLOP × its training FLOP/s (speed_sps × 3 × F_fwd), for work charged in
        # seconds (crypto, channel coding, DP clipping and noise); 0 where the training speed is not given
        flops_per_s = (np.zeros(n) if speed_sps is None
                       else 3.0 * self.forward_flops * np.asarray(speed_sps, dtype=np.float64))
        self.active_w = self.j_per_flop * flops_per_s
        self.compute = np.zeros(n)
        self.comm = np.zeros(n)
        self.counters = counters
        for k in self.KEYS:
            counters.setdefault(k, 0.0)
        self._pending: dict[tuple[int, int], float] = {}  # (device, job) → FLOPs of a job still running

    def job_started(self, device: int, job: int, samples: int) -> None:
        """A job of ``samples`` sample-gradients started on ``device`` (charged when it finishes)."""
        self._pending[(device, job)] = job_flops(samples, float(self.forward_flops[device]))

    def job_finished(self, device: int, job: int) -> None:
        """Charge a finished job's training energy (a job lost part-way is never charged [D])."""
        flops = self._pending.pop((device, job), None)
        if flops is None:
            return
        self._charge(device, compute_j(flops, self.j_per_flop[device]), "energy_compute_j")

    def job_lost(self, device: int) -> None:
        """Forget ``device``'s unfinished jobs (it dropped out)."""
        for key in [k for k in self._pending if k[0] == device]:
            del self._pending[key]

    def work(self, device: int, seconds: float) -> None:
        """Charge ``seconds`` of ``device``'s work other than training (crypto, channel coding, DP) at its active
        power, as compute energy."""
        self._charge(device, work_j(seconds, self.active_w[device]), "energy_compute_j")

    def transfer(self, device: int, bits: float, seconds: float, upload: bool) -> None:
        """Charge ``device``'s radio for one transfer end (``bits`` 0 for a transfer cut off part-way)."""
        self._charge(device, transfer_j(self.radios[device], bits, seconds, upload), "energy_comm_j")

    def _charge(self, device: int, joules: float, key: str) -> None:
        (self.compute if key == "energy_compute_j" else self.comm)[device] += joules
        self.counters[key] += joules
        self.counters["energy_device_j"] += joules

    def columns(self) -> dict[str, np.ndarray]:
        """Per-device columns for ``devices.csv``."""
        return {"energy_compute_j": self.compute, "energy_comm_j": self.comm, "energy_j": self.compute + self.comm}

    def summary_part(self, tiers: np.ndarray) -> dict[str, object]:
        """``summary.json``'s part: the ``energy`` block (``tiers``: each device's tier)."""
        return {"energy": self.summary(tiers)}

    def summary(self, tiers: np.ndarray) -> dict[str, object]:
        """``summary.json``'s ``energy``: totals, per-device mean/max and per-tier sums (joules)."""
        total = self.compute + self.comm
        per_tier: dict[str, dict[str, float]] = {}
        for t in sorted({str(x) for x in tiers}):
            m = np.asarray([str(x) == t for x in tiers])
            per_tier[t] = {"devices": int(m.sum()), "compute_j": float(self.compute[m].sum()),
                           "comm_j": float(self.comm[m].sum())}
        return {"device_j": float(total.sum()), "compute_j": float(self.compute.sum()),
                "comm_j": float(self.comm.sum()), "per_device_mean_j": float(total.mean()) if total.size else 0.0,
                "per_device_max_j": float(total.max()) if total.size else 0.0, "per_tier": per_tier}
