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

* ``fedalign`` — Mendieta et al., "Local Learning Matters: Rethinking Data Heterogeneity in Federated
  Learning", CVPR 2022 (:mod:`hierfl.learn.align`): cross-entropy plus μ times the Lipschitz term of the
  model's final block at a slim width; any protocol. Its slim pass is charged as a work factor.

* ``distrans`` — Yuan et al., "Addressing Heterogeneity in Federated Learning via Distributional
  Transformation", ECCV 2022 (:mod:`hierfl.learn.distrans`): each device trains an input-shaped offset with
  the dual-input model and keeps it (its host's per-device state); devices are evaluated with their own.

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
from hierfl.core.distrans import OffsetSpec
from hierfl.core.fedalign import AlignSpec, align_work_factor
from hierfl.core.feddc import DriftRule, DriftSpec
from hierfl.core.personal import PersonalSpec

__all__ = ["TRAINERS", "TrainerConfig", "SGDTrainer", "FedProxTrainer", "ScaffoldTrainer", "NoTrainer",
           "FedPerTrainer", "LGFedAvgTrainer", "FedMetaTrainer", "FedAvgMetaTrainer", "FedDCTrainer",
           "FedAlignTrainer", "DisTransTrainer"]

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

    def work_factor(self, model: Any, input_shape: tuple[int, ...], num_classes: int, call: Any) -> float:
        """A job's work relative to plain SGD on the same samples (``TrainSpec.work_factor``): 1 unless the
        trainer's loss costs extra passes. ``call(fn, *args)`` runs a model function (FLOPs) where torch is."""
        return 1.0



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
                    "[design default: edge]; cloud without edge servers is refused")

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
        if self.non_default("control_scope") and not scenario.topology.edge_servers:
            out.append(("training.trainer.control_scope", "chooses between the edges' and the cloud's control, and "
                        "there are no edge servers (topology.edge_servers: 0), so it would be ignored; allowed: "
                        "edge (the default) without edge servers", self.control_scope))
        return out


def _one_model(scenario: Any, name: str) -> list[tuple[str, str, Any]]:
    """Per-device architectures (``models:``) are refused: the trainer's model feature is ``model``'s."""
    if getattr(scenario, "models", None):
        return [("models", f"{name} trains the one architecture of `model`; allowed: no per-device models",
                 sorted(scenario.models))]
    return []


@TRAINERS.register
class FedAlignTrainer(TrainerConfig):
    """``trainer: {name: fedalign, mu: 0.45, width: 0.25}``: FedAlign (Mendieta et al., CVPR 2022).

    Local loss ``ℓ_CE + μ·(sg(ℓ_CE)/sg(ℓ_Lip))·ℓ_Lip`` (``normalize_lip``, the authors' code) or
    ``ℓ_CE + μ·ℓ_Lip`` (the paper), ``ℓ_Lip`` the squared gap between the final block's transfer-matrix
    spectral norms at full width and at width ``ω`` (:mod:`hierfl.learn.align`). A pure local-loss change:
    any protocol, any tier. A job's work is ``1 + ω²·F(block)/F(model)`` times a plain job's.
    """

    name: Literal["fedalign"] = "fedalign"
    mu: float = Field(default=0.45, ge=0.0, allow_inf_nan=False,
                      description="weight μ of the Lipschitz term (the authors' --mu) [design default 0.45, from the "
                                  "authors' code]")
    width: float = Field(default=0.25, gt=0.0, le=1.0, allow_inf_nan=False,
                         description="width multiplier ω of the slim pass through the final block (--width) "
                                     "[design default 0.25, from the authors' code]")
    normalize_lip: bool = Field(
        default=True,
        description="true: rescale the Lipschitz term each step to μ times the current cross-entropy (the authors' "
                    "code); false: add μ·ℓ_Lip (the paper's form) [design default: true]")
    power_iters: int = Field(default=10, ge=1, description="power iterations of the spectral-norm estimate, from the "
                                                           "all-ones vector [design default 10, from the authors' code]")
    clip_norm: float | None = Field(
        default=10.0, gt=0.0, allow_inf_nan=False,
        description="max-norm clipping of each local step's whole gradient (the authors' code clips at 10); null: "
                    "no clipping [design default 10]")

    def spec_fields(self) -> dict[str, Any]:
        """The ``align`` spec and the clipping norm."""
        return {"align": AlignSpec(float(self.mu), float(self.width), bool(self.normalize_lip), int(self.power_iters)),
                "clip_norm": None if self.clip_norm is None else float(self.clip_norm)}

    def work_factor(self, model: Any, input_shape: tuple[int, ...], num_classes: int, call: Any) -> float:
        """``1 + ω²·F(final block)/F(model)``: the slim pass's forward and backward."""
        from hierfl.learn.local import final_block_flops, forward_flops

        return align_work_factor(float(self.width), float(call(final_block_flops, model, input_shape, num_classes)),
                                 float(call(forward_flops, model, input_shape, num_classes)))

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """The model needs a slimmable final block (an ``mlp`` with a hidden layer, or a ``cnn``)."""
        out = _one_model(scenario, "fedalign")
        if not scenario.model.slimmable_final_block:
            out.append(("model", "fedalign slims the model's final block; allowed: an mlp with at least one hidden "
                        "layer, or a cnn", getattr(scenario.model, "name", None)))
        if scenario.runtime.precision != "fp32":
            out.append(("runtime.precision", "fedalign's loss runs in float32; allowed: fp32", scenario.runtime.precision))
        return out


@TRAINERS.register
class DisTransTrainer(TrainerConfig):
    """``trainer: {name: distrans, lr_offset: 0.001}``: DisTrans (Yuan et al., ECCV 2022) with the
    ``dual_input`` model (whose ``a`` is DisTrans's mixing).

    Each device keeps an input-shaped offset ``t_i`` (its host's per-device state), trained with the model on
    every batch (``lr_offset``, plain SGD); the model is averaged as usual, unweighted by default
    (``weighting`` must match ``protocol.weighting``); with ``offset_mode: local`` the offsets never leave
    the devices, with ``mean`` they travel behind the model and are averaged with it. With ``data.local_test_fraction`` each device is evaluated on its own test split through its
    own offset (``device_accuracy`` fields); the global accuracy is the model's with a zero offset.
    """

    name: Literal["distrans"] = "distrans"
    lr_offset: float = Field(default=1e-3, ge=0.0, allow_inf_nan=False,
                             description="plain SGD rate of the offsets (the model's is training.lr; the authors use "
                                         "5e-3 for it) [design default 1e-3, from the authors' code]")
    offset_mode: Literal["local", "mean"] = Field(
        default="local",
        description="what the servers do with the offsets: local = never aggregated, each device keeps its own (the "
                    "authors' non-IID script); mean = the offset travels behind the model, is averaged with it and "
                    "every device starts from the average (the hypernetwork mode is not built) [design default: "
                    "local]")
    weighting: Literal["uniform", "samples"] = Field(
        default="uniform",
        description="how the server averages the device models: uniform (the authors' agg_weights) or by sample "
                    "count; protocol.weighting must say the same [design default: uniform]")
    offset_update: Literal["joint", "alternating"] = Field(
        default="joint",
        description="joint: model and offset step from one gradient per batch (the authors' code); alternating: the "
                    "model steps, then the offset from the moved model's gradient (twice the work) [design default: "
                    "joint]")

    def spec_fields(self) -> dict[str, Any]:
        """The ``offset`` spec (its ``init_seed`` is set from the scenario seed by the build)."""
        return {"offset": OffsetSpec(self.offset_mode, float(self.lr_offset), self.offset_update)}

    def work_factor(self, model: Any, input_shape: tuple[int, ...], num_classes: int, call: Any) -> float:
        """2 with alternating updates (a second forward and backward per batch), else 1: the dual input's two
        backbone passes are in the model's own FLOPs already."""
        return float(OffsetSpec(update=self.offset_update).passes)

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """A dual-input model, matching device weights, float32."""
        out = _one_model(scenario, "distrans")
        if getattr(scenario.model, "name", None) != "dual_input":
            out.append(("model.name", "distrans trains an offset through a dual-input model; allowed: dual_input",
                        getattr(scenario.model, "name", None)))
        have = getattr(scenario.protocol, "weighting", None)
        if have is not None and have != self.weighting:
            out.append(("protocol.weighting", f"distrans with weighting {self.weighting} averages the device models "
                        f"{'unweighted' if self.weighting == 'uniform' else 'by sample count'}; allowed: "
                        f"{self.weighting}", have))
        if scenario.runtime.precision != "fp32":
            out.append(("runtime.precision", "distrans's jobs run in float32; allowed: fp32", scenario.runtime.precision))
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
    with FedPer's personal layers. Without per-device evaluation (``data.local_test_fraction`` and
    ``data.test_devices`` 0) ``support_fraction``, ``inner_lr`` and ``inner_steps`` are refused."""

    name: Literal["fedavgmeta"] = "fedavgmeta"

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """The fine-tuning knobs act only where devices are evaluated on their own data."""
        data = scenario.data
        if data.local_test_fraction > 0 or data.test_devices > 0:
            return []
        return [(f"training.trainer.{key}", "fedavgmeta fine-tunes a device only to evaluate it, and no device is "
                 "evaluated on its own (data.local_test_fraction: 0, data.test_devices: 0), so it would be ignored; "
                 "allowed: set data.local_test_fraction or data.test_devices (or leave it out)", getattr(self, key))
                for key in ("support_fraction", "inner_lr", "inner_steps") if self.non_default(key)]

    def personal_spec(self) -> PersonalSpec:
        """Fine-tuning at evaluation."""
        return PersonalSpec("finetune", _layers(self.head_layers), from_end=True,
                            support_fraction=self.support_fraction, inner_lr=self.inner_lr,
                            inner_steps=self.inner_steps)
