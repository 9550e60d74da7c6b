"""The driver's side of sample-level DP-SGD (``privacy.dp_sgd``): each device's accountant.

The privacy unit is one training example of one device, so every device has its own ε: the composition of
the DP-SGD steps its jobs ran on its data (Abadi et al., CCS 2016, accounted with ``dp-accounting`` 0.6.0).
:class:`DpSgdLedger` counts, per device, the steps of every job it starts, keyed by the job's sample count
``n`` and batch size ``b`` (a protocol may change what a job sees), and turns them into ε at δ:

* ``fixed_size`` batches — each step is ``SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(z/2))`` under
  ``REPLACE_ONE`` (the RDP accountant; the only relation dp-accounting covers for this sampling). Replacing one
  example changes the sum of clipped gradients by up to ``2C``, so noise ``zC`` is a Gaussian mechanism of
  multiplier ``z/2`` (dp-accounting's multiplier is the noise std over the sensitivity);
* ``poisson`` batches — each step is ``PoissonSampledDpEvent(b/n, GaussianDpEvent(z))`` under
  ``ADD_OR_REMOVE_ONE`` (sensitivity ``C``), RDP or PLD.

Steps with different ``(n, b)`` compose (RDP: their curves add). A job is counted when it starts: a job cut
short by churn is counted as run (an upper bound). With ``stop.epsilon`` a job that would take its device past
the budget is not started as a release: the run ends after the current event, before its update reaches a
server, and the job is not counted. The counts live in the driver's state, which checkpoints pickle, so a
resumed run reports the same ε. The largest device ε goes into every evaluation line (``epsilon``, ``delta``)
and ``summary.json``'s ``privacy`` block; each device's ε and steps into ``devices.csv``
(``dp_epsilon``, ``dp_steps``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch, job_samples, visible
from hierfl.privacy.config import make_accountant, quiet_accountant

__all__ = ["dp_sgd_ledger", "step_event", "DpSgdLedger"]


def step_event(sampling: str, n: int, b: int, z: float) -> Any:
    """The ``DpEvent`` of one DP-SGD step on a device's ``n`` examples with batch ``b`` (see the module docstring)."""
    import dp_accounting as dpa  # noqa: PLC0415 (only privacy runs need it)

    if sampling == "fixed_size":
        return dpa.SampledWithoutReplacementDpEvent(int(n), int(b), dpa.GaussianDpEvent(z / 2.0))
    return dpa.PoissonSampledDpEvent(min(1.0, b / n), dpa.GaussianDpEvent(z))


def dp_sgd_ledger(scenario: Any, samples: np.ndarray) -> DpSgdLedger | None:
    """The run's per-device accountant, or None without ``privacy.dp_sgd`` (``samples``: each device's count)."""
    section = getattr(scenario, "privacy", None)
    cfg = None if section is None else getattr(section, "dp_sgd", None)
    if cfg is None:
        return None
    return DpSgdLedger(cfg, np.asarray(samples, dtype=np.int64), scenario.stop.epsilon)


class DpSgdLedger:
    """Every device's DP-SGD steps so far and what they spend (see the module docstring)."""

    per_job = True  # the driver reports every job it starts (:meth:`job`)

    def __init__(self, cfg: Any, samples: np.ndarray, budget: float | None) -> None:
        self.z = float(cfg.noise_multiplier)
        self.clip = float(cfg.clip)
        self.sampling = str(cfg.batch_sampling)
        self.accountant = cfg.accountant_kind()
        self.samples = np.asarray(samples, dtype=np.int64)
        self.delta = cfg.delta_for(int(self.samples.max()) if self.samples.size else 1)
        self.budget = budget
        self.counts: dict[int, dict[tuple[int, int], int]] = {}  # device → (n, b) → steps
        self.jobs: dict[int, int] = {}                           # device → jobs counted
        self._curves: dict[tuple[int, int], np.ndarray] = {}     # (n, b) → one step's RDP curve
        self._orders: np.ndarray | None = None
        self._eps: dict[tuple[tuple[tuple[int, int], int], ...], float] = {}

    # -- accounting -----------------------------------------------------------------------------------------
    def _curve(self, n: int, b: int) -> np.ndarray:
        key = (n, b)
        if key not in self._curves:
            acc = make_accountant("rdp", self.sampling == "fixed_size")
            with quiet_accountant():
                acc.compose(step_event(self.sampling, n, b, self.z), 1)
            self._orders = np.asarray(acc._orders, dtype=np.float64)
            self._curves[key] = np.asarray(acc._rdp, dtype=np.float64)
        return self._curves[key]

    def epsilon_of(self, counts: dict[tuple[int, int], int]) -> float:
        """ε at δ of a device that ran ``counts`` steps ((n, b) → steps)."""
        key = tuple(sorted((k, int(v)) for k, v in counts.items() if v > 0))
        if not key:
            return 0.0
        if key not in self._eps:
            if self.accountant == "rdp":
                from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon  # noqa: PLC0415

                total = sum(steps * self._curve(n, b) for (n, b), steps in key)
                assert self._orders is not None
                self._eps[key] = float(compute_epsilon(self._orders, total, self.delta)[0])
            else:
                import dp_accounting as dpa  # noqa: PLC0415

                acc = make_accountant("pld", False)
                with quiet_accountant():
                    acc.compose(dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(step_event(self.sampling, n, b, self.z),
                                                                             steps) for (n, b), steps in key]))
                    self._eps[key] = float(acc.get_epsilon(self.delta))
        return self._eps[key]

    def job(self, device: int, spec: TrainSpec) -> bool:
        """A job of ``device`` starts: count its steps; False (not counted) when it would pass the ε budget."""
        if spec.dp_sgd is None:
            if spec.method is None and spec.train:  # a protocol's own plain job built without the run's DP-SGD
                raise ValueError(f"device {device}: the protocol started a training job of its own without "
                                 "privacy.dp_sgd (its updates would leave unprotected); allowed with privacy.dp_sgd: a "
                                 "protocol whose jobs keep the run's training spec")
            return True
        if spec.method is not None:
            raise ValueError(f"device {device}: a job method's job ({type(spec.method).__name__}) cannot honour "
                             "privacy.dp_sgd (its own loop and loss are not clipped per example)")
        n = visible(job_samples(int(self.samples[device]), device, spec), spec)
        b = effective_batch(n, spec)
        counts = dict(self.counts.get(device, {}))
        counts[(n, b)] = counts.get((n, b), 0) + int(spec.steps or 0)
        if self.budget is not None and self.epsilon_of(counts) > self.budget:
            return False
        self.counts[device] = counts
        self.jobs[device] = self.jobs.get(device, 0) + 1
        return True

    def device_epsilons(self) -> np.ndarray:
        """Each device's ε so far (0 for a device that ran no DP-SGD step)."""
        out = np.zeros(self.samples.size, dtype=np.float64)
        for d, counts in self.counts.items():
            out[d] = self.epsilon_of(counts)
        return out

    def epsilon(self) -> float:
        """The largest device ε."""
        return max((self.epsilon_of(c) for c in self.counts.values()), default=0.0)

    # -- the ledger interface the driver calls (as hierfl.privacy.driver.PrivacyLedger) -------------------
    def released(self, participants: list[int], tier: str = "cloud") -> str | None:
        """An aggregation at ``tier``: no noise is added there (the noise is in every step), nothing to count."""
        return None

    def uploaded(self, device: int, stats: dict[str, float] | None = None) -> str | None:
        """An upload left ``device``: its steps were counted when its job started, nothing more to count."""
        return None

    def observe(self, reports: list[dict[str, Any]]) -> None:
        """No aggregation rule of its own reports anything."""

    def eval_fields(self) -> dict[str, Any]:
        """The largest device ε at δ so far."""
        return {"epsilon": self.epsilon(), "delta": self.delta}

    def columns(self) -> dict[str, np.ndarray]:
        """``devices.csv``'s columns: each device's ε and DP-SGD steps."""
        steps = np.zeros(self.samples.size, dtype=np.int64)
        for d, counts in self.counts.items():
            steps[d] = sum(counts.values())
        return {"dp_epsilon": self.device_epsilons(), "dp_steps": steps}

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s ``privacy`` block."""
        eps = self.device_epsilons()
        ran = eps[[d for d in self.counts]] if self.counts else np.zeros(0)
        steps = [sum(c.values()) for c in self.counts.values()]
        return {"privacy": {
            "mechanism": "dp_sgd", "noise_multiplier": self.z, "clip": self.clip, "delta": self.delta,
            "epsilon": float(eps.max()) if eps.size else 0.0, "accountant": self.accountant,
            "sampling": ("fixed_size_without_replacement (replace-one)" if self.sampling == "fixed_size"
                         else "poisson (add-or-remove-one)"),
            "budget": self.budget, "devices": int(self.samples.size), "devices_trained": len(self.counts),
            "mean_epsilon": float(ran.mean()) if ran.size else 0.0,
            "max_steps": int(max(steps, default=0)), "jobs": int(sum(self.jobs.values())),
        }}
