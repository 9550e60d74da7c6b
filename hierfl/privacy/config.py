"""``privacy:`` — differential privacy of the cloud's aggregation (DP-FedAvg) and its accounting.

``privacy: {dp: {mode, noise_multiplier, clip, adaptive: {...}, accountant, delta}}``; ``dp: null`` (the
default) is today's run. What the section may be combined with is checked here (:meth:`PrivacySection.problems`):
the accountant must cover the sampling the protocol really does, or the run would print a wrong ε.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.privacy.config_dp_sgd import MODEL_LIMITS, DpSgdConfig, dp_sgd_problems
from hierfl.privacy.rules import DpMeanRule

__all__ = ["AdaptiveClipConfig", "DpCostConfig", "DpConfig", "PrivacySection", "round_event", "replace_one",
           "make_accountant", "epsilon_of", "quiet_accountant", "dp_sampling", "dp_cohort"]


class AdaptiveClipConfig(ConfigModel):
    """``adaptive: {enabled, init, target_unclipped_quantile, lr, count_stddev}`` (Andrew et al., NeurIPS 2021)."""

    enabled: bool = Field(default=True, description="follow the quantile-based clip rule (central mode only) [D]")
    init: PositiveFloat = Field(default=0.1, description="initial clip norm C₀ (TFF and Flower default)")
    target_unclipped_quantile: float = Field(default=0.5, ge=0.0, le=1.0,
                                             description="γ: the fraction of updates meant to fit the clip")
    lr: NonNegativeFloat = Field(default=0.2, description="η of the geometric update S ← S·exp(−η(b̄ − γ))")
    count_stddev: PositiveFloat | None = Field(default=None, description="σ_b, the noise on the unclipped "
                                               "count; null: C/20 (TFF and Flower default)")


class DpCostConfig(ConfigModel):
    """``costs:`` what DP charges a device in emulated time and bytes, per upload (from the model's size only)."""

    clip_ops: NonNegativeFloat = Field(default=3.0, description="FLOP equivalents per element to clip the update "
                                       "(norm: 2, scale: 1) [D]")
    noise_ops: NonNegativeFloat = Field(default=20.0, description="FLOP equivalents per Gaussian sample a device draws "
                                        "in local mode (plus 1 to add it) [D]")
    count_bytes: NonNegativeInt = Field(default=4, description="bytes of the clipped bit each device sends with "
                                        "adaptive clipping (one scalar) [D]")
    efficiency: PositiveFloat = Field(default=0.25, le=1.0, description="fraction of a device's FLOP/s this "
                                      "memory-bound vector work reaches [D]")


class DpConfig(ConfigModel):
    """``privacy.dp``: DP-FedAvg (McMahan et al., ICLR 2018) at the cloud's synchronous aggregation."""

    mode: Literal["central", "local"] = Field(
        default="central", description="central: the cloud adds N(0,(zS)²) to the sum of clipped updates; local: "
        "each device adds N(0,(zS)²) to its own clipped update")
    noise_multiplier: PositiveFloat = Field(default=1.0, description="z: noise std over the clip norm")
    clip: PositiveFloat = Field(default=1.0, description="S: L2 bound of each update (model − start model) when "
                                "adaptive clipping is off (not training.clip_norm, which clips gradients)")
    adaptive: AdaptiveClipConfig = Field(default=AdaptiveClipConfig(),
                                         description="adaptive clipping (central mode; on by default there)")
    accountant: Literal["auto", "rdp", "pld"] = Field(
        default="auto", description="auto: RDP (closed forms, fast, covers every sampling here); pld: the PLD "
        "accountant, tighter, where dp-accounting 0.6.0 covers the sampling (not a fixed-size cohort)")
    async_policy: Literal["conservative", "nominal"] = Field(
        default="conservative", description="buffered asynchronous protocols: the ε reported and budgeted; "
        "conservative: per device, composed over its participations without amplification; nominal: Poisson "
        "sampling with q = K/N over server steps (assumes random check-ins)")
    tier: Literal["cloud", "edge"] = Field(
        default="cloud", description="where the noised mean is formed: cloud (the cloud's aggregation of device "
        "updates) or edge (each edge server's aggregation of its own devices' updates, in a hierarchy: central mode "
        "trusts the edge server, which adds the noise; local mode trusts no server)")
    delta: Literal["auto"] | float = Field(default="auto", description="δ of the reported ε; auto: 1/N^1.1")
    costs: DpCostConfig = Field(default=DpCostConfig(), description="the devices' DP work and extra bytes per upload")

    def adaptive_on(self) -> bool:
        """Adaptive clipping runs: central mode, not switched off (in local mode it is never on)."""
        return self.mode == "central" and self.adaptive.enabled

    def accountant_for(self, sampling: str) -> str:
        """The accountant used: ``rdp`` under ``auto``; a fixed-size central cohort is RDP's only."""
        return "pld" if self.accountant == "pld" and not replace_one(self.mode, sampling) else "rdp"

    def delta_for(self, devices: int) -> float:
        """δ: the stated value, or ``N^−1.1``."""
        return float(devices) ** -1.1 if self.delta == "auto" else float(self.delta)

    def rule(self, denominator: float | None = None) -> DpMeanRule:
        """The aggregation rule (at the cloud, or at each edge server with ``tier: edge``); ``denominator``: the
        expected cohort ``qN`` of Poisson sampling, where the rule also releases on an empty round (central)."""
        a = self.adaptive
        return DpMeanRule(mode=self.mode, noise_multiplier=self.noise_multiplier, clip=self.clip,
                            adaptive=self.adaptive_on(), init=a.init, quantile=a.target_unclipped_quantile, lr=a.lr,
                            count_stddev=a.count_stddev, denominator=denominator,
                            releases_empty=denominator is not None and self.mode == "central")


class PrivacySection(ConfigModel):
    """``privacy: {dp: …}``; ``dp: null`` (default) is a run without differential privacy."""

    dp: DpConfig | None = Field(default=None, description="DP-FedAvg at the cloud (null: off)")
    dp_sgd: DpSgdConfig | None = Field(default=None, description="sample-level DP-SGD in the devices' local "
                                       "training, accounted per device (null: off)")

    @property
    def default(self) -> bool:
        """No privacy mechanism."""
        return self.dp is None and self.dp_sgd is None

    def module_loop_limits(self, scenario: Any) -> Mapping[str, str]:
        """What of a model DP-SGD's per-sample gradients cannot honour (the build's check, ``hierfl.assemble.loops``)."""
        return MODEL_LIMITS if self.dp_sgd is not None else {}

    def problems(self, scenario: Any) -> list[Problem]:
        """What cannot be combined with ``privacy.dp`` (each would give a wrong ε or ignore a setting)."""
        dp, out = self.dp, dp_sgd_problems(scenario)
        stop_eps = getattr(scenario.stop, "epsilon", None)
        if dp is None:
            if stop_eps is not None and self.dp_sgd is None:
                out.append(Problem("stop.epsilon", "a privacy budget needs privacy.dp or privacy.dp_sgd (no ε is "
                                   "accounted)", stop_eps))
            return out
        proto = scenario.protocol
        n = scenario.devices.count
        sampling = dp_sampling(scenario)
        if dp.tier == "edge" and sampling != "members":
            able = ", ".join(_protocols(lambda c: c.edge_cohort_sampling == "members"))
            out.append(Problem("privacy.dp.tier", f"protocol {proto.name!r} declares no synchronous edge rounds of "
                               "each edge server's own devices, the participation the edge accountant covers (ε would "
                               f"be wrong); protocols with them: {able}; allowed here: cloud", dp.tier))
            return out
        if sampling not in ("fixed_size", "buffered", "poisson", "each_upload", "members"):
            able = ", ".join(_protocols(lambda c: c.cohort_sampling in ("fixed_size", "buffered", "each_upload")))
            edge = (" (its edge rounds are covered: privacy.dp.tier: edge)"
                    if type(proto).edge_cohort_sampling == "members" else "")
            out.append(Problem("privacy.dp", f"protocol {proto.name!r} declares neither a fixed-size or Poisson "
                               "cohort at a synchronous cloud aggregation, nor a buffer of K updates per server step, "
                               "nor updates applied one by one, the participation an accountant here covers (ε would "
                               f"be wrong){edge}; protocols that declare one: {able}", proto.name))
            return out
        if sampling == "each_upload" and dp.mode != "local":
            out.append(Problem("privacy.dp.mode", f"protocol {proto.name!r} applies each update alone as it arrives: "
                               "the server would see every update before its noise, and one update is no aggregate; "
                               "allowed: local (each device clips and noises its own upload)", dp.mode))
            return out
        if dp.mode == "local" and "device_uplink" not in type(proto).channel_links:
            able = ", ".join(_protocols(lambda c: "device_uplink" in c.channel_links and (
                c.cohort_sampling is not None or c.edge_cohort_sampling is not None)))
            out.append(Problem("privacy.dp.mode", f"in local mode each device clips and noises its upload as it leaves "
                               f"the device, but protocol {proto.name!r} moves its uploads outside the device uplink "
                               "(the noise would never be added); protocols whose uploads cross it: "
                               f"{able}; allowed here: central", dp.mode))
            return out
        m = dp_cohort(scenario, sampling)
        if not m:
            out.append(Problem("privacy.dp", f"protocol {proto.name!r} declares no {dp.tier} cohort size", proto.name))
        if getattr(proto, "weighting", "uniform") != "uniform":
            out.append(Problem("protocol.weighting", "DP-FedAvg weighs every user 1 (sensitivity S/C); allowed with "
                               "privacy.dp: uniform", proto.weighting))
        trainer = scenario.training.trainer
        if len(trainer.layout.parts) > 1:
            out.append(Problem("training.trainer", f"trainer {trainer.name!r} sends more than the model (control "
                               "variates, step sizes); privacy.dp clips and noises the model update only, so the "
                               "rest would leave unprotected; allowed: a trainer whose messages are the model alone",
                               trainer.name))
        rule_tier = "edge" if dp.tier == "edge" else "cloud"
        if not getattr(scenario.aggregation, rule_tier).is_mean:
            out.append(Problem(f"aggregation.{rule_tier}", f"privacy.dp replaces the {rule_tier}'s mean with its "
                               "noised mean; allowed with it: mean", getattr(scenario.aggregation, rule_tier).name))
        avail = scenario.devices.availability
        churn = avail.churn or scenario.devices.dropout > 0 or any(e.spec.churn for e in scenario.events)
        if sampling == "fixed_size" and churn:
            out.append(Problem("privacy.dp", "devices that go offline change the population a cohort is drawn "
                               "from: the fixed-size accountant would not describe the sampling; allowed: no churn "
                               "(steady availability, devices.dropout: 0, no churn events)", None))
        if not (sampling == "buffered" and dp.mode == "central") and "async_policy" in dp.model_fields_set:
            out.append(Problem("privacy.dp.async_policy", "read only for central DP with a buffered asynchronous "
                               f"protocol (cohort_sampling: buffered); {proto.name!r} in {dp.mode} mode accounts without it",
                               dp.async_policy))
        if sampling == "fixed_size" and m and scenario.straggler.select_count(int(m)) != m:
            out.append(Problem("straggler.name", f"selects {scenario.straggler.select_count(int(m))} devices for a "
                               f"cohort of {m}: the accountant's sample size would be wrong; allowed with privacy.dp: a "
                               "policy that selects the cohort itself", scenario.straggler.name))
        if dp.accountant == "pld" and replace_one(dp.mode, sampling):
            out.append(Problem("privacy.dp.accountant", "dp-accounting 0.6.0's PLD accountant does not cover "
                               "sampling without replacement (the cohort); allowed: auto, rdp", dp.accountant))
        if dp.mode == "local" and "enabled" in dp.adaptive.model_fields_set and dp.adaptive.enabled:
            out.append(Problem("privacy.dp.adaptive.enabled", "adaptive clipping noises a count at the server: "
                               "central mode only; allowed in local mode: false", True))
        if dp.adaptive_on():
            if dp.tier == "edge" and dp.adaptive.count_stddev is None:
                out.append(Problem("privacy.dp.adaptive.count_stddev", "at the edge tier each edge server divides "
                                   "by its own expected cohort, so the default σ_b = C/20 differs per edge and "
                                   "z < 2σ_b cannot be checked at load; allowed: a number above z/2 (or "
                                   "adaptive.enabled: false)", None))
            if "clip" in dp.model_fields_set:
                out.append(Problem("privacy.dp.clip", "adaptive clipping starts from adaptive.init and ignores "
                                   "clip; set adaptive.enabled: false to use a fixed clip", dp.clip))
            sb = dp.rule().count_std(m if sampling == "poisson" else int(m or 1))
            if dp.noise_multiplier >= 2.0 * sb and not (dp.tier == "edge" and dp.adaptive.count_stddev is None):
                out.append(Problem("privacy.dp.noise_multiplier", f"adaptive clipping needs z < 2·σ_b = {2 * sb:g} "
                                   "(σ_b: adaptive.count_stddev, default C/20); raise adaptive.count_stddev or "
                                   "turn adaptive clipping off", dp.noise_multiplier))
        if dp.delta != "auto" and not 0.0 < float(dp.delta) < 1.0:
            out.append(Problem("privacy.dp.delta", "allowed: auto or 0 < δ < 1", dp.delta))
        elif stop_eps is not None and m and not out:  # the budget is checked before each next round: not the first
            rep = replace_one(dp.mode, sampling)
            first = epsilon_of(dp.accountant_for(sampling), rep, round_event(
                dp.mode, n, int(m), dp.noise_multiplier, sampling, dp.async_policy, rate=m / n), 1, dp.delta_for(n))
            if first > stop_eps:
                out.append(Problem("stop.epsilon", f"one release alone spends ε = {first:.4g} at δ = "
                                   f"{dp.delta_for(n):.3g}; allowed: at least that (or more noise)", stop_eps))
        return out


def dp_sampling(scenario: Any) -> str | None:
    """How the noised aggregation's inputs are picked, for the accountant: the protocol's cloud sampling
    (``fixed_size``, ``buffered``, ``poisson``, ``each_upload``), or ``members`` with ``privacy.dp.tier: edge``
    (the edge's own devices; None where the protocol declares no edge rounds)."""
    dp, proto = scenario.privacy.dp, scenario.protocol
    if dp is not None and dp.tier == "edge":
        return type(proto).edge_cohort_sampling
    return proto.sampling_scheme()


def dp_cohort(scenario: Any, sampling: str | None) -> float | None:
    """The expected inputs of one noised aggregation: the fixed denominator ``C`` (``qN`` under Poisson sampling,
    a real number; an edge round's expected devices with ``tier: edge``); 1 for updates applied one by one."""
    proto, n = scenario.protocol, scenario.devices.count
    if sampling == "poisson":
        rate = proto.sampling_rate()
        return None if rate is None else float(rate) * n
    if sampling == "each_upload":
        return 1
    return proto.expected_inputs(n, scenario.topology.edge_servers or 0).get(
        "edge" if sampling == "members" else "cloud")


def round_event(mode: str, devices: int, cohort: int, z: float, sampling: str = "fixed_size",
                basis: str = "conservative", rate: float | None = None) -> Any:
    """The ``DpEvent`` of one release (a round, or a device's participation; see :mod:`hierfl.privacy.driver`);
    ``rate``: the sampling probability ``q`` of Poisson sampling."""
    import dp_accounting as dpa  # noqa: PLC0415 (only privacy runs need it)

    # a device's own release (local mode; an edge round of its edge; one upload of its own): its clipped update
    # may change by 2S when its data do, and the noise is z·S
    if mode == "local" or sampling in ("members", "each_upload"):
        return dpa.GaussianDpEvent(z / 2.0)
    if sampling == "fixed_size":  # replace-one: the sum's sensitivity is 2S
        return dpa.SampledWithoutReplacementDpEvent(devices, cohort, dpa.GaussianDpEvent(z / 2.0))
    if sampling == "poisson":  # each device's own coin q; add/remove: a device's update adds at most S to the sum
        if rate is None:
            raise ValueError("Poisson sampling needs its rate q")
        return dpa.PoissonSampledDpEvent(float(rate), dpa.GaussianDpEvent(z))
    if basis == "conservative":  # asynchronous: per device, no amplification; add/remove, sensitivity S
        return dpa.GaussianDpEvent(z)
    return dpa.PoissonSampledDpEvent(cohort / devices, dpa.GaussianDpEvent(z))  # nominal: random check-ins


def replace_one(mode: str, sampling: str) -> bool:
    """Whether the event is accounted under the replace-one relation (a fixed-size central cohort)."""
    return mode == "central" and sampling == "fixed_size"


def make_accountant(kind: str, replace: bool) -> Any:
    """A fresh accountant: RDP under replace-one for a fixed-size cohort, else RDP or PLD (add/remove)."""
    import dp_accounting as dpa  # noqa: PLC0415
    from dp_accounting import pld, rdp  # noqa: PLC0415

    if replace:  # sampling without replacement: RDP under replace-one only
        return rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    return rdp.RdpAccountant() if kind == "rdp" else pld.PLDAccountant()


def epsilon_of(kind: str, replace: bool, event: Any, count: int, delta: float) -> float:
    """ε at ``delta`` of ``event`` composed ``count`` times (0 for none) with accountant ``kind``."""
    if count <= 0:
        return 0.0
    with quiet_accountant():
        acc = make_accountant(kind, replace)
        acc.compose(event, int(count))
        return float(acc.get_epsilon(delta))


@contextmanager
def quiet_accountant() -> Iterator[None]:
    """dp-accounting's RDP series may not converge at a few fractional orders for Poisson sampling; it leaves
    them out of ε (still a valid bound) and logs a warning per order through absl: kept off a run's stderr."""
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _protocols(accept: Any) -> list[str]:
    """The registered protocols whose config class ``accept`` takes (for a refused setting's message)."""
    from hierfl.protocols import PROTOCOLS  # noqa: PLC0415 (only a refused setting's message needs them)

    return [name for name in PROTOCOLS.names() if accept(PROTOCOLS.get(name))]
