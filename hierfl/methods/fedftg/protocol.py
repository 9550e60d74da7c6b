"""FedFTG: FedAvg rounds whose average is fine-tuned at the server by data-free distillation.

L. Zhang, L. Shen, L. Ding, D. Tao, L.-Y. Duan, "Fine-tuning Global Model via Data-Free Knowledge
Distillation for Non-IID Federated Learning", CVPR 2022 (arXiv 2203.09249); the rules follow the
authors' code (``methods/local_fn_gan.py::train_FedGAN_common``). docs/explanation/algorithms.md,
FedFTG.

Round ``t`` (synchronous, at the cloud):

1. the cloud samples ``m = max(⌈C·N⌉, 1)`` devices and sends them the fine-tuned model ``w_t`` (with
   ``sampling: bernoulli``, as the authors' code, each device joins on its own coin of probability ``C``,
   thrown again until somebody joins: ``empty_cohort: redraw``, :mod:`hierfl.protocols.cohort`);
2. each trains locally (``training:``) and uploads its model; a device's first upload also carries
   its label histogram ``n_k^y`` (``4·C`` bytes, ``histograms: once``; ``every_round`` sends it with
   every upload);
3. when the round closes the cloud starts ONE server job (``env.tier("cloud").run("fedftg", …)``) on the
   received models: it averages them (``w̄ = Σ n_k θ_k / Σ n_k``, the student) and trains a conditional
   generator and the student against the teachers ``θ_k`` (:func:`hierfl.methods.fedftg.trainer.finetune`),
   charged ``B·I·[I_g·K·3(F_G + 2F) + I_d·(F_G + 3F + K·F)]`` FLOPs on the cloud's compute
   (``servers.cloud``), after any earlier job of the cloud;
4. at the job's end the round's cloud aggregation is complete (accounted then, so a run bounded by
   ``stop.rounds`` ends with a fine-tuned model), the fine-tuned model is the cloud's model ``w_{t+1}``
   and the next round begins.

Virtual time of a round::

    max over selected i of (download_i + compute_i + upload_i)  +  flops / servers.cloud FLOP/s

The generator lives in the cloud's server state across rounds (and checkpoints). The cloud's model
during the job is still ``w_t`` (evaluations in that window see it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.env import Env, Payload, RoundEmpty
from hierfl.kernel.engine import Event
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, ProtocolConfig
from hierfl.protocols.cohort import EmptyCohort, SamplingKind, coin_problems, empty_cohort_field, sampling_field
from hierfl.methods.fedavg.protocol import FedAvg

__all__ = ["TASK", "FTGKnobs", "FedFTG", "FedFTGConfig", "FinetuneMsg"]

TASK = "fedftg"  # the server task (hierfl.methods.fedftg.server)
_SEED_BOUND = 2 ** 62


@dataclass(frozen=True)
class FinetuneMsg(Payload):
    """The cloud's fine-tuning job of round ``round``."""

    round: int


class FTGKnobs(ProtocolConfig):
    """FedFTG's server-side keys, shared by the flat protocol (``fedftg``) and the hierarchical one
    (``fedftg_hier``, :mod:`hierfl.methods.fedftg.protocol_hier`)."""

    needs_label_counts: ClassVar[bool] = True  # the server weighs its teachers by their label histograms
    reads_each_update: ClassVar[str | None] = "fine-tunes the global model on each device's model as a teacher"
    # the server's generator and student steps are loops of their own on modules that load the parameters only
    module_loops: ClassVar[Mapping[str, str]] = {
        "dropout": "its server's student steps run a loop of their own",
        "running_stats": "its server loads teachers and student from their parameters alone"}

    iters: PositiveInt = Field(default=10, description="I: iterations of the fine-tuning job, each a fresh noise "
                                                       "batch (authors' code: 10)")
    gen_steps: NonNegativeInt = Field(default=1, description="I_g: generator steps per iteration, each one Adam "
                                                             "step per teacher (authors' code: 1)")
    student_steps: NonNegativeInt = Field(default=5, description="I_d: student SGD steps per iteration on the "
                                                                 "iteration's generated batch (authors' code: 5)")
    batch_size: PositiveInt | None = Field(
        default=None, description="B: generated samples per iteration; null = training.batch_size, or 50 when "
                                  "that is null (authors' code: the client batch size, 50)")
    lr_student: PositiveFloat = Field(default=0.1, description="SGD learning rate of the student (authors' code: 0.1)")
    lr_gen: PositiveFloat = Field(default=0.01, description="Adam learning rate of the generator (authors' code: 0.01)")
    lr_decay: PositiveFloat = Field(
        default=0.998, le=1.0, description="both server learning rates are multiplied by lr_decay^t in round t "
                                           "(authors' code: 0.998; their clients' rate decays too, which this "
                                           "protocol leaves to training.lr)")
    weight_decay: NonNegativeFloat | None = Field(
        default=None, description="the student's weight decay; null = training.weight_decay (authors' code: the "
                                  "client weight decay)")
    lambda_cls: NonNegativeFloat = Field(default=1.0, description="λ_cls: weight of the generator's fidelity "
                                                                  "(class) term (authors' code: 1)")
    lambda_div: NonNegativeFloat = Field(default=1.0, description="λ_div: weight of the generator's diversity term, "
                                                                  "divided by the number of teachers (authors' code: 1)")
    md_loss: Literal["code", "kl"] = Field(
        default="code", description="model discrepancy: code (authors' code: L1 distance of logits for the "
                                    "generator, class-averaged soft cross-entropy for the student) or kl (the "
                                    "paper: KL divergence in both)")
    cls_weighting: Literal["code", "per_sample"] = Field(
        default="code", description="class weights in the fidelity term: code (the batch-mean cross-entropy times "
                                    "the batch-mean weight, authors' code) or per_sample (each sample's "
                                    "cross-entropy times its weight)")
    noise_dim: PositiveInt = Field(default=100, description="generator noise dimension (authors' code: 100 for "
                                                            "CIFAR-10 and MNIST, 256 for CIFAR-100)")
    gen_width: PositiveInt = Field(default=64, description="generator width (ngf; authors' code: 64)")
    persist_gen_optimizer: bool = Field(
        default=False, description="keep the generator's Adam moments across rounds in the server state (false: "
                                   "a fresh Adam every round, as the authors' code; the generator's weights persist "
                                   "either way)")
    histograms: Literal["once", "every_round"] = Field(
        default="once", description="when a device's label histogram (4·C bytes) travels with its upload: on its "
                                    "first upload (design default) or on every upload")

    def task_params(self, env: Env, round_: int, weights: list[float], counts: list[list[int]],
                    point: tuple[int, ...] = ()) -> dict[str, Any]:
        """The ``fedftg`` server task's parameters for round ``round_``: the learning rates decayed, and the
        seed of the generator's draws from the stream ``("generator_noise", *point, round_)`` (``point``:
        the edge server's id when the job runs at an edge, empty at the cloud)."""
        spec = env.spec
        decay = self.lr_decay ** round_
        return {
            "weights": [float(w) for w in weights], "counts": counts,
            "iters": self.iters, "gen_steps": self.gen_steps, "student_steps": self.student_steps,
            "batch_size": self.batch_size or spec.batch_size or 50,
            "noise_dim": self.noise_dim, "gen_width": self.gen_width,
            "lr_student": self.lr_student * decay, "lr_gen": self.lr_gen * decay,
            "weight_decay": self.weight_decay if self.weight_decay is not None else spec.weight_decay,
            "lambda_cls": self.lambda_cls, "lambda_div": self.lambda_div, "md_loss": self.md_loss,
            "cls_weighting": self.cls_weighting, "persist_gen_optimizer": self.persist_gen_optimizer,
            "noise_seed": int(env.rng("generator_noise", *point, round_).integers(_SEED_BOUND)),
        }

    def trainer_problems(self, scenario: Any) -> list[Problem]:
        """FedFTG distils into one shared model from plain local training."""
        trainer = scenario.training.trainer.name
        if trainer not in ("sgd", "fedprox"):
            return [Problem("training.trainer", f"{self.name} distils into one shared model from plain local "
                            "training; allowed: sgd, fedprox", trainer)]
        return []


@PROTOCOLS.register
class FedFTGConfig(FTGKnobs):
    """``protocol: {name: fedftg, fraction: 0.1, iters: 10, ...}``: FedAvg plus server fine-tuning."""

    name: Literal["fedftg"] = "fedftg"
    decides_on_models: ClassVar[str | None] = "fine-tunes the average at the server by distillation"
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud", synchronous=True),)

    fraction: float = Field(default=0.1, gt=0.0, le=1.0,
                            description="C: fraction of devices per round (authors' script: 0.1)")
    sampling: SamplingKind = sampling_field("max(⌈C·N⌉, 1) of the online devices, uniformly without replacement; "
                                            "the authors' code draws bernoulli")
    empty_cohort: EmptyCohort = empty_cohort_field("redraw", "an empty round: no fine-tuning, and the next round "
                                                             "begins at once")
    read_only_with: ClassVar[dict[str, ReadWith]] = {"empty_cohort": ReadWith("sampling", ("bernoulli",))}
    weighting: Literal["samples", "uniform"] = Field(
        default="samples", description="the cloud average before fine-tuning: weighted by sample count (authors' "
                                       "code) or uniform")

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """``max(⌈C·N⌉, 1)`` updates at the cloud."""
        return {"cloud": min(devices, max(math.ceil(self.fraction * devices - 1e-9), 1)), "edge": None}

    def check(self, scenario: Any) -> list[Problem]:
        """The cloud over devices directly; a trainer that keeps one shared model."""
        problems: list[Problem] = []
        if scenario.topology.edge_servers:
            problems.append(Problem("topology.edge_servers", "fedftg fine-tunes at the cloud over the devices' "
                                    "models; allowed: 0 (no edge servers); with edge servers use protocol "
                                    "fedftg_hier (the cloud fine-tunes over the edge models)",
                                    scenario.topology.edge_servers))
        m = self.expected_inputs(scenario.devices.count, 0)["cloud"] or 1
        return problems + self.trainer_problems(scenario) + coin_problems(self, scenario, m)

    def create(self, env: Env) -> FedFTG:
        """A FedFTG run."""
        return FedFTG(self, env)


class FedFTG(FedAvg):
    """FedAvg's rounds; each round's average is fine-tuned by one server job before it is broadcast."""

    def __init__(self, cfg: FedFTGConfig, env: Env) -> None:
        super().__init__(cfg, env)  # type: ignore[arg-type]  # FedAvg reads fraction, sampling, empty_cohort and weighting only
        self.cfg = cfg  # type: ignore[assignment]
        counts = env.world.label_counts
        if counts is None:
            raise ValueError("fedftg needs every device's label histogram (world.label_counts)")
        self.counts = counts
        self.teachers: dict[int, tuple[Any, float]] = {}  # this round's models at the cloud, with their weights
        self.closing: list[int] = []  # the devices of the round being fine-tuned
        self.reported: set[int] = set()  # devices whose histogram the cloud holds
        self.hist_bytes = 4 * int(env.world.num_classes)

    def _begin_round(self) -> None:
        self.teachers = {}
        super()._begin_round()

    def on_train_done(self, event: Event) -> None:
        """Collect the job; upload the model (and the histogram, the first time or every round)."""
        env = self.env
        device = event.payload.device
        env.finish_training(self.jobs[device])
        size = env.world.model_bytes
        if self.cfg.histograms == "every_round" or device not in self.reported:
            size += self.hist_bytes
        env.send(("device", device), ("cloud", 0), "upload_done", event.payload, "upload", size=size)

    def on_upload_done(self, event: Event) -> None:
        """Keep the model as a teacher with its weight, and fold it into the cloud's round (as FedAvg)."""
        env = self.env
        device = event.payload.device
        self.arrived.add(device)
        self.reported.add(device)
        full = float(env.world.samples[device]) if self.cfg.weighting == "samples" else 1.0
        weight = self.barrier.weight(device, full)
        handle = self.jobs.pop(device).params
        self.teachers[device] = (handle, weight)
        env.tier("cloud").add(handle, weight, env.controls.coef(device))
        self.barrier.arrive(device)

    def _close(self, arrived: list[int]) -> None:
        env = self.env
        if not arrived:
            env.telemetry.record(RoundEmpty({"round": self.round}))
            self._next_round()
            return
        if env.stopping:
            return
        order = sorted(arrived)
        self.closing = order
        params = self.cfg.task_params(env, self.round, [self.teachers[d][1] for d in order],
                                      [[int(c) for c in self.counts[d]] for d in order])
        env.tier("cloud").run(TASK, [self.teachers[d][0] for d in order], "finetune_done", FinetuneMsg(self.round),
                              params)

    def on_finetune_done(self, event: Event) -> None:
        """The server job is over: the round's aggregation is complete (accounted now, which may end a run
        bounded by stop.rounds) and the fine-tuned model is the cloud's model; the next round begins."""
        env = self.env
        # the cloud's running average of the round is the job's student, already averaged by the job
        env.tier("cloud").commit(self.closing, base=self.round_model)
        env.set_global(event.payload.outputs[0])
        self._next_round()

    def _next_round(self) -> None:
        self.round += 1
        if not self.env.stopping:
            self._begin_round()
