"""The driver's side of differential privacy: the rule put in place of the cloud's (or the edges') mean, the
per-upload noise of devices whose updates are applied one by one, and the accountant.

:class:`PrivacyLedger` counts the noised releases (one per aggregation at ``privacy.dp.tier``, or per upload)
and each device's participations, and turns them into ε at δ with ``dp-accounting`` 0.6.0 (the events below). Its
counts are the accountant's state: they live in the driver's state, which checkpoints pickle, so a resumed run
reports the same ε. ε goes into every evaluation line (``epsilon``, ``delta``) and into ``summary.json``'s
``privacy`` block; ``stop.epsilon`` ends the run before a release would spend more than the budget.

Which event describes a release (``hierfl.privacy.config.round_event``):

* ``central`` with a fixed-size cohort (a synchronous protocol declaring ``fixed_size``) — a uniform cohort of ``C`` of the ``N`` devices without
  replacement, the Gaussian mechanism on the sum of the clipped updates:
  ``SampledWithoutReplacementDpEvent(N, C, GaussianDpEvent(z/2))`` per round, composed ``T`` times, with the
  RDP accountant under ``REPLACE_ONE`` (the only relation dp-accounting 0.6.0 covers for this sampling; its
  PLD accountant does not). Under replace-one the sum's L2 sensitivity is ``2S`` (one clipped update swapped
  for another), so noise ``zS`` is a Gaussian mechanism of multiplier ``z/2`` — dp-accounting's multiplier
  is the noise std over the sensitivity of the chosen relation;
* ``central`` with a buffer of ``K`` updates per server step (a protocol declaring ``buffered``) — participation follows availability
  and speed, so no amplification by sampling formally applies. ``conservative`` (default): a device's
  releases are ``GaussianDpEvent(z)`` (add/remove: its update adds at most ``S``), composed over the most
  server steps any one device contributed to; ``nominal``: ``PoissonSampledDpEvent(K/N, GaussianDpEvent(z))``
  per server step, which assumes random check-ins. Both are reported; ``async_policy`` picks the one in the
  evaluation lines and the budget;
* ``central`` with Poisson sampling (``poisson``: each device's own coin ``q``, McMahan et al. 2018) —
  ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` per round under add/remove (one user's clipped update adds
  at most ``S`` to the sum), composed over every round: an empty round releases the noise alone and counts;
* ``local`` — no amplification (each device's own message is seen): a device's releases are
  ``GaussianDpEvent(z/2)`` (its clipped update may change by ``2S``), composed over the most rounds any one
  device took part in;
* the edge tier (``privacy.dp.tier: edge``; ``members``), central (the edge server adds the noise: protects
  against the cloud, the other edges and the devices) or local (each device: protects against its edge server
  too) — a device takes part in its own edge's rounds only; each edge release including it is
  ``GaussianDpEvent(z/2)`` for it, composed over its participations, per device, without amplification (the
  edge's sampling is proportional to data, which no accountant here covers); counted at each edge commit;
* uploads applied one by one (``each_upload``, asynchronous protocols, local only) — each upload is ``GaussianDpEvent(z/2)``,
  counted as it leaves its device (:meth:`PrivacyLedger.uploaded`), composed over a device's uploads.

In local mode every device clips and noises its own upload as it leaves the device, whatever the protocol
(:func:`privacy_upload`, the ``dp_local`` task of :mod:`hierfl.privacy.server`): before a transfer channel
quantises it and before SecAgg masks it, so no server ever sees an un-noised update; the aggregator's rule only
forms the fixed-denominator mean. The accounting above does not depend on where the noise is drawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.privacy.config import (dp_cohort, dp_sampling, make_accountant, epsilon_of, quiet_accountant,
                                   replace_one, round_event)

__all__ = ["privacy_rule", "privacy_edge_rule", "privacy_upload", "privacy_overhead", "privacy_ledger",
           "PrivacyLedger"]


def _dp(scenario: Any) -> Any:
    section = getattr(scenario, "privacy", None)
    return None if section is None else section.dp


def privacy_rule(scenario: Any) -> Any:
    """The cloud's DP aggregation rule, or None (no ``privacy.dp``; DP at the edge tier; uploads noised by their
    devices one by one)."""
    dp = _dp(scenario)
    if dp is None or dp.tier != "cloud":
        return None
    sampling = dp_sampling(scenario)
    if sampling == "each_upload":
        return None
    return dp.rule(dp_cohort(scenario, sampling) if sampling == "poisson" else None)


def privacy_edge_rule(scenario: Any, world: Any = None) -> Any:
    """The edge servers' DP aggregation rule (``privacy.dp.tier: edge``), or None. With the run's ``world``, each
    edge server divides by its own expected cohort, from the devices it serves when the run starts
    (``ProtocolConfig.edge_expected``): a fixed denominator, which later re-groupings do not move."""
    dp = _dp(scenario)
    if dp is None or dp.tier != "edge":
        return None
    rule = dp.rule()
    if world is None:
        return rule
    own = {e: scenario.protocol.edge_expected(int(world.edge_members(e).size)) for e in range(world.num_edges)}
    return rule.model_copy(update={"denominators": {e: float(k) for e, k in own.items() if k} or None})


def privacy_upload(scenario: Any) -> dict[str, Any] | None:
    """Local DP (``privacy.dp.mode: local``, any tier and protocol): the parameters of the ``dp_local`` server task
    that clips and noises each device upload against the model the device trained from, as it leaves the device
    (before a transfer channel quantises it and SecAgg masks it), or None."""
    dp = _dp(scenario)
    if dp is None or dp.mode != "local":
        return None
    return {"clip": float(dp.clip), "noise_multiplier": float(dp.noise_multiplier)}


def privacy_overhead(scenario: Any) -> dict[str, tuple[int, float, float, float]]:
    """What DP adds to each device upload (``privacy.dp.costs``): ``{"device_uplink": (extra bytes, encode FLOPs
    per element, decode FLOPs per element, efficiency)}``, or {} without ``privacy.dp``.

    The device computes its update's norm and scales it (``clip_ops`` per element), in local mode draws and adds
    its noise (``noise_ops`` + 1 per element), and with adaptive clipping sends its clipped bit as one more scalar
    (``count_bytes``)."""
    section = getattr(scenario, "privacy", None)
    if section is None or section.dp is None:
        return {}
    dp, c = section.dp, section.dp.costs
    ops = c.clip_ops + ((c.noise_ops + 1.0) if dp.mode == "local" else 0.0)
    extra = int(c.count_bytes) if dp.adaptive_on() else 0
    return {"device_uplink": (extra, float(ops), 0.0, float(c.efficiency))}


def privacy_ledger(scenario: Any) -> PrivacyLedger | None:
    """The run's accountant, or None without ``privacy.dp``."""
    dp = _dp(scenario)
    if dp is None:
        return None
    n = scenario.devices.count
    sampling = dp_sampling(scenario)
    m = dp_cohort(scenario, sampling)
    rate = scenario.protocol.sampling_rate() if sampling == "poisson" else None
    return PrivacyLedger(dp, n, int(m or 1), scenario.stop.epsilon, sampling or "fixed_size", rate)


class PrivacyLedger:
    """The releases so far and what they spend."""

    def __init__(self, dp: Any, devices: int, cohort: int, budget: float | None, sampling: str = "fixed_size",
                 rate: float | None = None) -> None:
        self.mode = dp.mode
        self.tier = dp.tier
        self.z = float(dp.noise_multiplier)
        self.devices, self.cohort = int(devices), int(cohort)
        self.sampling = sampling
        self.rate = rate  # Poisson sampling's q
        self.clip = float(dp.clip)
        self.policy = dp.async_policy if sampling == "buffered" and dp.mode == "central" else None
        self.delta = dp.delta_for(devices)
        self.accountant = dp.accountant_for(sampling)
        self.budget = budget
        self.adaptive = dp.adaptive_on()
        self.releases = 0                            # noised aggregates (cloud aggregations)
        self.participations: dict[int, int] = {}     # device → rounds it took part in (local DP)
        self.last: tuple[float, float] | None = None  # the last round's (clip norm, noise std on the average)
        self.clipped = self.updates = 0              # updates clipped, of the updates aggregated
        self.work: dict[str, list[float]] = {}       # the devices' DP work per direction (set by the driver)
        self._cache: dict[tuple[str, int], float] = {}
        self._rdp: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # basis → RDP (orders, one release's RDP)

    def _event(self, basis: str) -> Any:
        return round_event(self.mode, self.devices, self.cohort, self.z, self.sampling, basis, self.rate)

    def _per_device(self, basis: str) -> bool:
        """Whether ε composes a device's participations (local; the edge tier; uploads one by one; asynchronous
        conservative) or the releases (a central cohort, fixed-size or Poisson)."""
        return (self.mode == "local" or self.sampling in ("members", "each_upload")
                or (self.sampling == "buffered" and basis == "conservative"))

    def steps(self, basis: str | None = None) -> int:
        """Compositions that bound the privacy loss: releases, or a device's most participations."""
        if self._per_device(basis or self.policy or "conservative"):
            return max(self.participations.values(), default=0)
        return self.releases

    def epsilon(self, steps: int | None = None, basis: str | None = None) -> float:
        """ε at δ after ``steps`` compositions (default: now) on ``basis`` (asynchronous: the policy's)."""
        basis = basis or self.policy or "conservative"
        k = self.steps(basis) if steps is None else steps
        if k <= 0:
            return 0.0
        key = (basis, k)
        if key not in self._cache:
            replace = replace_one(self.mode, self.sampling)
            if self.accountant == "rdp":  # RDP composes linearly: one release's curve, scaled (compose(event, k))
                from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon  # noqa: PLC0415

                if basis not in self._rdp:
                    acc = make_accountant("rdp", replace)
                    with quiet_accountant():
                        acc.compose(self._event(basis), 1)
                    self._rdp[basis] = (np.asarray(acc._orders, dtype=np.float64), np.asarray(acc._rdp, dtype=np.float64))
                orders, one = self._rdp[basis]
                self._cache[key] = float(compute_epsilon(orders, 0.0 + k * one, self.delta)[0])
            else:
                self._cache[key] = epsilon_of("pld", replace, self._event(basis), k, self.delta)
        return self._cache[key]

    def released(self, participants: list[int], tier: str = "cloud") -> str | None:
        """One noised aggregate of ``participants``' updates at ``tier`` (an aggregation at another tier than
        ``privacy.dp.tier`` is no release: ignored); a stop reason when the next would pass the budget."""
        if tier != self.tier or self.sampling == "each_upload":
            return None
        return self._count(participants)

    def uploaded(self, device: int, stats: dict[str, float] | None = None) -> str | None:
        """``device`` sent one upload it clipped and noised itself (local mode); ``stats``: whether the ``dp_local``
        task clipped it. With updates applied one by one it is a release of its own, counted when it leaves the
        device (whether or not the server applies it): a stop reason when the next would pass the budget. In a
        round (cloud or edge tier) the release is the round's aggregate, counted at its commit (:meth:`released`)."""
        if stats and "clipped" in stats:
            self.clipped += int(stats["clipped"])
            self.updates += 1
        if self.sampling != "each_upload":
            return None
        self.last = (self.clip, self.z * self.clip)  # the noise std on the update itself
        return self._count([device])

    def _count(self, participants: list[int]) -> str | None:
        self.releases += 1
        for d in participants:
            self.participations[int(d)] = self.participations.get(int(d), 0) + 1
        if self.budget is None:
            return None
        # the next release adds one composition (the worst case for a device when ε is a device's)
        return "epsilon" if self.epsilon(self.steps() + 1) > self.budget else None

    def observe(self, reports: list[dict[str, Any]]) -> None:
        """The cloud rule's reports of a commit: the clip norm it used, the noise std on the average, the clipped
        (central mode: in local mode the devices clipped, and :meth:`uploaded` counted them)."""
        for rep in reports:
            if "dp_clip" in rep:
                self.last = (float(rep["dp_clip"]), float(rep["dp_noise_std"]))
                if self.mode != "local":
                    self.clipped += int(rep["clipped"])
                    self.updates += int(rep["m"])

    def eval_fields(self) -> dict[str, Any]:
        """The fields of an evaluation line: ε at δ so far, and the last round's clip norm and noise std."""
        clip, std = self.last if self.last is not None else (None, None)
        return {"epsilon": self.epsilon(), "delta": self.delta, "dp_clip": clip, "dp_noise_std": std}

    def sampling_label(self) -> str:
        """What the accountant assumed about participation."""
        if self.sampling == "members":
            return (f"edge rounds ({self.mode}: a device's releases in its own edge's rounds, composed without "
                    "amplification)")
        if self.sampling == "each_upload":
            return "none (local: a device's own uploads, each one noised, composed without amplification)"
        if self.mode == "local":
            return "none (local: a device's own releases)"
        if self.sampling == "fixed_size":
            return "fixed_size_without_replacement"
        if self.sampling == "poisson":
            return f"poisson (q = {self.rate:g} per round, add/remove, fixed denominator qN; empty rounds release noise)"
        return ("buffered (conservative: a device's participations, no amplification)" if self.policy == "conservative"
                else "buffered (nominal: Poisson q = K/N per server step, assumes random check-ins)")

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s ``privacy`` block."""
        steps = self.steps()
        return {"privacy": {
            "mechanism": "dp_fedavg", "mode": self.mode, "noise_multiplier": self.z, "delta": self.delta,
            "epsilon": self.epsilon(), "accountant": self.accountant, "releases": self.releases,
            "compositions": steps, "devices": self.devices, "cohort": self.cohort,
            "sampling": self.sampling_label(), "async_policy": self.policy,
            "epsilon_conservative": self.epsilon(basis="conservative") if self.policy else None,
            "epsilon_nominal": self.epsilon(basis="nominal") if self.policy else None,
            "adaptive_clipping": self.adaptive, "budget": self.budget,
            "last_clip": None if self.last is None else self.last[0],
            "last_noise_std": None if self.last is None else self.last[1],
            "clipped_fraction": self.clipped / self.updates if self.updates else None,
            "device_work_s": float(sum(w[2] for w in self.work.values())),
            "extra_bytes": int(sum(w[1] for w in self.work.values())),
            "max_participations": int(max(self.participations.values(), default=0)),
            "mean_participations": float(np.mean(list(self.participations.values()))) if self.participations else 0.0,
        }}
