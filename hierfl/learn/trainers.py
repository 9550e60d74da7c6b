"""Local-trainer plug-ins (``training.trainer``): what a device's job optimises and what it sends back.

* ``sgd`` — minibatch SGD with ``training.momentum`` and ``training.weight_decay`` (the default).
* ``fedprox`` — Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
  Heterogeneous Networks", MLSys 2020 (arXiv 1812.06127), docs/explanation/algorithms.md §5.5: the local objective
  gets ``(μ/2)‖w − w_t‖²``, i.e. ``μ (w − w_t)`` is added to every gradient. Works with every
  protocol; with FedAsync/AHFL's own ρ the two coefficients add up.
* ``scaffold`` — Karimireddy et al., ICML 2020, option II (docs/explanation/algorithms.md §5.6; math in
  :mod:`hierfl.core.scaffold`). Each device's control ``c_i`` lives in its device host and
  persists across rounds; the cloud keeps ``c``, stepped ``c ← c + Σ_{i∈S} κ_i Δc_i``. The paper
  averages ``Δy`` uniformly and uses ``κ_i = 1/N``; hierfl's FedAvg/HierFAVG average models by
  sample count, so ``κ_i = n_i / n`` by default (``c`` then tracks ``Σ (n_i/n) c_i``, the gradient
  of the objective those averages optimise) [D]; ``control_weighting: uniform`` is the paper's
  rule. (With ``uniform``, epoch-based jobs and power-law sample counts — a device's step count
  ∝ its data — we measured divergence on ``fedavg_synthetic.yaml``.) Messages carry two vectors: down ``(x, c)``,
  up ``[y; Δc]`` (an edge server relays ``[x_ℓ; Σ κ_i Δc_i]``), so every transfer is twice the
  model's bytes. Needs a synchronous protocol that supports it (``fedavg``, ``hierfavg``).

* ``feddc`` — Gao et al., "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling and
  Correction", CVPR 2022 (docs/explanation/algorithms.md §5.14; math in :mod:`hierfl.core.feddc`):
  each device keeps a drift ``h_i`` and a control ``c_i`` (its host's per-device state, like
  SCAFFOLD's ``c_i``); the aggregator that receives the devices' updates runs the server rule
  (:meth:`TrainerConfig.round_rule`). Messages carry two vectors each way.

* ``fedper``, ``lg_fedavg``, ``fedmeta``, ``fedavgmeta`` — personalisation (docs/explanation/algorithms.md
  §5.10, FedMeta arXiv 1802.07876): see :mod:`hierfl.learn.personal`. What stays on a device is
  never sent: a message carries only the global parameters (``message_params``).

These are config models only (no torch): the runtime reads :meth:`TrainerConfig.spec_fields`
through :class:`~hierfl.core.work.TrainSpec`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from hierfl.config.base import ConfigModel, rename_alias
from hierfl.config.registry import Registry
from hierfl.core.feddc import DriftRule, DriftSpec
from hierfl.core.personal import PersonalSpec

__all__ = ["TRAINERS", "TrainerConfig", "SGDTrainer", "FedProxTrainer", "ScaffoldTrainer", "NoTrainer",
           "FedPerTrainer", "LGFedAvgTrainer", "FedMetaTrainer", "FedAvgMetaTrainer", "FedDCTrainer"]

TRAINERS: Registry = Registry("trainer")


class TrainerConfig(ConfigModel):
    """Base of the local-trainer configs.

    Class attributes state what the trainer needs from the rest of the scenario (checked at load
    time by :mod:`hierfl.scenario.checks`): ``needs_control_variates`` — a protocol that carries
    SCAFFOLD's control variates; ``needs_every_update`` — why every trained update must arrive
    (no straggler policy that drops updates, no devices going offline), or None.
    """

    needs_control_variates: ClassVar[bool] = False
    needs_every_update: ClassVar[str | None] = None
    # no model is trained or evaluated (timing-only runs): accuracy targets make no sense
    timing_only: ClassVar[bool] = False

    @property
    def payload_factor(self) -> int:
        """Vectors per message: every transfer moves this many model-sized float32 vectors."""
        return 1

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`~hierfl.core.work.TrainSpec` fields this trainer sets."""
        return {}

    # the key whose layer split the build checks against the model (personalised trainers)
    layer_key: ClassVar[str | None] = None

    def round_rule(self, members: int, tier: str) -> Any:
        """The rule an aggregator of ``tier`` applies at the end of a synchronous round of updates from
        ``members`` devices, in place of a server optimizer (FedDC's drift), or None (plain averaging)."""
        return None

    @property
    def edge_controls(self) -> bool:
        """Whether an edge server keeps its own server control ``c_e`` for its devices (FedDC), instead of
        relaying its devices' control deltas to the cloud's ``c`` (SCAFFOLD)."""
        return False

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """``(key path, message, value)`` of each setting elsewhere in the scenario this trainer refuses."""
        return []



@TRAINERS.register
class NoTrainer(TrainerConfig):
    """``trainer: none``: timing only. Every time, selection, staleness, queue and counter is what a
    training run of the same scenario gives, but no job is run (an update is the model the job
    started from) and no model is evaluated (evaluation lines carry ``accuracy: null``). For system
    studies at 10^5–10^6 devices: round times, queue lengths, contention, churn."""

    timing_only: ClassVar[bool] = True
    name: Literal["none"] = "none"

    def spec_fields(self) -> dict[str, Any]:
        """``train: false``."""
        return {"train": False}


@TRAINERS.register
class SGDTrainer(TrainerConfig):
    """``trainer: sgd``: plain minibatch SGD (momentum and weight decay from ``training:``)."""

    name: Literal["sgd"] = "sgd"


@TRAINERS.register
class FedProxTrainer(TrainerConfig):
    """``trainer: {name: fedprox, mu: 0.01}``: SGD on ``F_k(w) + (μ/2)‖w − w_t‖²``."""

    name: Literal["fedprox"] = "fedprox"
    mu: float = Field(default=0.01, ge=0.0, allow_inf_nan=False,
                      description="proximal coefficient μ >= 0 (grid 0.001–1; 0 = SGD) [D/K]")

    def spec_fields(self) -> dict[str, Any]:
        """``mu``."""
        return {"mu": float(self.mu)}


@TRAINERS.register
class ScaffoldTrainer(TrainerConfig):
    """``trainer: {name: scaffold, control_weighting: uniform}``: option-II control variates."""

    name: Literal["scaffold"] = "scaffold"
    needs_control_variates: ClassVar[bool] = True
    # Option II updates c_i on the device when its job runs; the server's c moves only by the Δc_i
    # that arrive. An update that ran but never arrives (cut by a straggler policy, or its device
    # went offline while uploading) would leave c ≠ mean(c_i) for good, so such runs are refused.
    needs_every_update: ClassVar[str | None] = "every update that was trained to arrive (c = mean of the c_i)"

    control_weighting: Literal["samples", "uniform"] = Field(
        default="samples",
        description="server control step c += Σ κ_i Δc_i with κ_i = n_i/n (samples, matching the sample-weighted "
                    "model average) or 1/N (uniform, the paper's choice with its uniform average) [D]")

    @property
    def payload_factor(self) -> int:
        """Model and control travel together."""
        return 2

    def spec_fields(self) -> dict[str, Any]:
        """``control_variates``."""
        return {"control_variates": True}


@TRAINERS.register
class FedDCTrainer(TrainerConfig):
    """``trainer: {name: feddc, alpha: 0.01, server_rule: code}``: FedDC (Gao et al., CVPR 2022), local
    drift decoupling and correction (:mod:`hierfl.core.feddc`).

    Each device keeps a drift ``h_i`` and a control ``c_i``; messages carry two vectors each way, down
    ``(w, c)`` and up ``[θ⁺; δc_i]``, like SCAFFOLD's. The aggregator that receives the devices'
    updates (the cloud under FedAvg, each edge under HierFAVG) steps ``c`` by ``(1/N) Σ δc_i`` and, with
    the code's rule, sets ``w = mean θ⁺ + H/N`` over its ``N`` devices.
    """

    name: Literal["feddc"] = "feddc"
    needs_control_variates: ClassVar[bool] = True
    needs_every_update: ClassVar[str | None] = ScaffoldTrainer.needs_every_update
    # the server's c step: c += (1/N) Σ δc_i (δc_i already carries ω_i)
    control_weighting: ClassVar[str] = "uniform"

    alpha: float = Field(default=0.01, ge=0.0, allow_inf_nan=False,
                         description="penalty α of ‖θ + h_i − w‖² (α_i = α/ω_i); the authors' code uses 0.01 "
                                     "for CIFAR, 0.1 for MNIST and 0.005 for synthetic data [design default 0.01]")
    server_rule: Literal["code", "paper"] = Field(
        default="code",
        description="code: w = unweighted mean of the participants' θ⁺ plus the mean drift H/N over all devices "
                    "(needs protocol.weighting: uniform); paper: w = sample-weighted mean of θ⁺ + h_i (needs "
                    "protocol.weighting: samples) [design default: code]")

    clip_norm: float | None = Field(
        default=10.0, gt=0.0, allow_inf_nan=False,
        description="max-norm clipping of each local step's whole gradient (the authors' code clips at 10); "
                    "null: no clipping [design default 10]")

    @property
    def payload_factor(self) -> int:
        """Model and control travel together."""
        return 2

    def spec_fields(self) -> dict[str, Any]:
        """``control_variates``, the ``drift`` spec and the clipping norm."""
        return {"control_variates": True, "drift": DriftSpec(float(self.alpha), self.server_rule),
                "clip_norm": None if self.clip_norm is None else float(self.clip_norm)}

    control_scope: Literal["edge", "cloud"] = Field(
        default="edge",
        description="under a hierarchy, whose control c the devices use: their edge's own c_e, stepped by the "
                    "edge over its members (edge), or the cloud's, relayed by the edges as SCAFFOLD's (cloud) "
                    "[design default: edge]")

    def round_rule(self, members: int, tier: str) -> Any:
        """The aggregator's rule over a round of device updates from ``members`` devices, or None."""
        keeps = tier == "edge" and self.control_scope == "edge"
        code = self.server_rule == "code"
        return DriftRule(members, keeps, code) if code or keeps else None

    @property
    def edge_controls(self) -> bool:
        """``control_scope: edge``."""
        return self.control_scope == "edge"

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """The protocol's device weights must match the server rule, and no server optimizer may step the
        tier the rule runs at (the rule sets the model itself)."""
        out: list[tuple[str, str, Any]] = []
        want = "uniform" if self.server_rule == "code" else "samples"
        have = getattr(scenario.protocol, "weighting", None)
        if have != want:
            out.append(("protocol.weighting", f"feddc with server_rule {self.server_rule} averages device models "
                        f"{'unweighted' if want == 'uniform' else 'by sample count'}; allowed: {want}", have))
        for tier in ("cloud", "edge"):
            if self.server_rule == "code" and scenario.server_optimizer.at(tier) is not None:
                out.append((f"server_optimizer.{tier}", "feddc's server rule sets the model itself; allowed: "
                            "no server optimizer", scenario.server_optimizer.at(tier).name))
        return out


LayerSplit = int | list[str]


def _layers(value: LayerSplit) -> int | tuple[str, ...]:
    return value if isinstance(value, int) else tuple(value)


class _PersonalBase(TrainerConfig):
    """Shared by the personalised trainers: the :class:`~hierfl.core.personal.PersonalSpec` they send."""

    def personal_spec(self) -> PersonalSpec:
        """What a job does on its device."""
        raise NotImplementedError

    def spec_fields(self) -> dict[str, Any]:
        """``personal`` (its ``split_seed`` is set from the scenario seed by the build)."""
        return {"personal": self.personal_spec()}


@TRAINERS.register
class FedPerTrainer(_PersonalBase):
    """``trainer: {name: fedper, head_layers: 1}``: FedPer (arXiv 1912.00818) — global base, local head.

    ``head_layers``: the last k layers (modules owning parameters), or a list of module names
    (``num_head_layers`` is an alias) [D: 1, docs/explanation/algorithms.md §5.10]."""

    name: Literal["fedper"] = "fedper"
    layer_key: ClassVar[str | None] = "training.trainer.head_layers"
    head_layers: int | list[str] = Field(default=1, description="local head: last k layers, or module names")

    @model_validator(mode="before")
    @classmethod
    def _alias(cls, data: Any) -> Any:
        return rename_alias(data, "num_head_layers", "head_layers")

    @model_validator(mode="after")
    def _some_head(self) -> FedPerTrainer:
        if isinstance(self.head_layers, int) and self.head_layers < 1:
            raise ValueError("head_layers must be >= 1 (0 layers kept local is FedAvg: use trainer sgd)")
        if isinstance(self.head_layers, list) and not self.head_layers:
            raise ValueError("head_layers: name at least one module")
        return self

    def personal_spec(self) -> PersonalSpec:
        """A split keeping the head."""
        return PersonalSpec("split", _layers(self.head_layers), from_end=True)


@TRAINERS.register
class LGFedAvgTrainer(_PersonalBase):
    """``trainer: {name: lg_fedavg, global_layers: 2}``: LG-FedAvg (arXiv 2001.01523) — local
    representation, global top ``global_layers`` layers (or the list of module names that are
    global). The paper averages the global layers unweighted: set ``protocol.weighting: uniform``
    (FedAvg) as ``scenarios/lg_fedavg.yaml`` does [V: §5.10]."""

    name: Literal["lg_fedavg"] = "lg_fedavg"
    layer_key: ClassVar[str | None] = "training.trainer.global_layers"
    global_layers: int | list[str] = Field(default=2, description="global top: last k layers, or module names")
    warmup_rounds: int = Field(default=0, ge=0, description="first cloud rounds trained as plain FedAvg (the whole "
                                                            "model global); devices then start from that model")

    @model_validator(mode="before")
    @classmethod
    def _alias(cls, data: Any) -> Any:
        return rename_alias(data, "num_layers_keep", "global_layers")

    @model_validator(mode="after")
    def _some_global(self) -> LGFedAvgTrainer:
        if isinstance(self.global_layers, int) and self.global_layers < 1:
            raise ValueError("global_layers must be >= 1")
        if isinstance(self.global_layers, list) and not self.global_layers:
            raise ValueError("global_layers: name at least one module")
        return self

    def personal_spec(self) -> PersonalSpec:
        """A split keeping everything but the top."""
        if isinstance(self.global_layers, int):
            return PersonalSpec("split", self.global_layers, from_end=False, warmup_rounds=self.warmup_rounds)
        # names of global layers: resolved against the model by the host (the complement stays local)
        return PersonalSpec("split", ("!",) + tuple(self.global_layers), from_end=False,
                            warmup_rounds=self.warmup_rounds)


class _MetaKnobs(_PersonalBase):
    """Support/query split, the inner step and optional personal layers (FedMeta + FedPer)."""

    layer_key: ClassVar[str | None] = "training.trainer.head_layers"
    support_fraction: float = Field(default=0.2, gt=0.0, lt=1.0,
                                    description="share of each device's samples in its support set")
    inner_lr: float = Field(default=0.01, gt=0.0, allow_inf_nan=False,
                            description="α of the adaptation step (Meta-SGD: α's initial value)")
    inner_steps: int = Field(default=1, ge=1, description="adaptation steps on the support set")
    head_layers: int | list[str] = Field(default=0, description="personal layers kept on the device (FedPer): "
                                                                "last k layers or module names; 0 = none")

    @model_validator(mode="after")
    def _head(self) -> _MetaKnobs:
        if isinstance(self.head_layers, int) and self.head_layers < 0:
            raise ValueError("head_layers must be >= 0")
        return self


@TRAINERS.register
class FedMetaTrainer(_MetaKnobs):
    """``trainer: {name: fedmeta, learner: maml | meta_sgd, first_order: false, support_fraction: 0.2}``:
    FedMeta (Chen et al., arXiv 1802.07876) with MAML or Meta-SGD; ``head_layers`` > 0 keeps
    personal layers on the device (FedMeta + FedPer). The outer rate is ``training.lr``."""

    name: Literal["fedmeta"] = "fedmeta"
    learner: Literal["maml", "meta_sgd"] = Field(default="maml", description="maml (fixed α) or meta_sgd (learned α)")
    first_order: bool = Field(default=False, description="MAML without the second-order term")

    @property
    def payload_factor(self) -> int:
        """Meta-SGD's global vector is ``[θ; α]``."""
        return 2 if self.learner == "meta_sgd" else 1

    def personal_spec(self) -> PersonalSpec:
        """The meta-learner."""
        return PersonalSpec(self.learner, _layers(self.head_layers), from_end=True,
                            support_fraction=self.support_fraction, inner_lr=self.inner_lr,
                            inner_steps=self.inner_steps, first_order=self.first_order)


@TRAINERS.register
class FedAvgMetaTrainer(_MetaKnobs):
    """``trainer: {name: fedavgmeta, inner_lr: 0.01, inner_steps: 1}``: FedAvgMeta (FedMeta's baseline) —
    plain SGD jobs; evaluation fine-tunes on the device's support set first. ``head_layers`` > 0:
    with FedPer's personal layers."""

    name: Literal["fedavgmeta"] = "fedavgmeta"

    def personal_spec(self) -> PersonalSpec:
        """Fine-tuning at evaluation."""
        return PersonalSpec("finetune", _layers(self.head_layers), from_end=True,
                            support_fraction=self.support_fraction, inner_lr=self.inner_lr,
                            inner_steps=self.inner_steps)
