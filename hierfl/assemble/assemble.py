"""``build``: a validated :class:`Scenario` → dataset, partition, world, dynamics and initial model.

Every random draw comes from its own named stream of the scenario seed, so what a scenario
describes is the same on every machine and with any executor.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hierfl.assemble.dynamics import availability_labels, build_dynamics
from hierfl.assemble.hetero import DeviceModels, device_models, layout_problems
from hierfl.assemble.loops import module_loop_problems
from hierfl.assemble.public import carve_public
from hierfl.assemble.world import build_world
from hierfl.config.errors import ConfigError, Problem
from hierfl.core.dynamics import Dynamics
from hierfl.core.labelnoise import flip_labels
from hierfl.core.device_eval import local_test_split
from hierfl.core.public import PublicData, public_bytes
from hierfl.core.rng import stream, stream_seed
from hierfl.core.work import TrainSpec, model_bytes
from hierfl.core.world import World
from hierfl.data import DataError, Dataset
from hierfl.learn.local import forward_flops, init_params, model_layout
from hierfl.learn.randomness import model_features
from hierfl.scenario.schema import Scenario

__all__ = ["Built", "ModelCall", "build", "in_process", "train_spec"]

ModelCall = Callable[..., Any]
"""``call(fn, *args)`` → ``fn(*args)``, run where torch is: the model's torch work during the build
(initial parameters, layout, FLOPs). A Ray run sends it to a host actor, so the driver process never
imports torch (about 1.6 CPU s and 0.2 GB; see ``hierfl.runtime.start.ExecutorStart.model_call``)."""


def in_process(fn: Callable[..., Any], *args: Any) -> Any:
    """The default :data:`ModelCall`: ``fn(*args)`` here."""
    return fn(*args)


@dataclass
class Built:
    """Everything a run needs before the first event."""

    scenario: Scenario
    dataset: Dataset
    parts: list[np.ndarray]
    world: World
    spec: TrainSpec
    init_params: np.ndarray
    dynamics: Dynamics | None = None
    availability_labels: list[str] = field(default_factory=list)
    """Per device, what ``devices.csv`` says about its availability (``always``, ``markov``, ``trace``, …)."""
    eval_sets: list[tuple[int, np.ndarray, np.ndarray | None]] = field(default_factory=list)
    """Per-device evaluation (``data.local_test_fraction``, ``data.test_devices``): ``(device, its
    training rows, its held-out test rows)``; held-out devices (ids ≥ N) have ``None`` as test rows
    (they are tested on the query part of their support split)."""
    models: DeviceModels | None = None
    """Which model each device runs (``model``, or its tier's entry of ``models:``); None: ``model`` everywhere."""
    public_rows: np.ndarray | None = None
    """``data.public``: the public samples' rows in the training arrays (behind every private row); None: no public split."""
    clean_labels: np.ndarray | None = None
    """``data.label_noise``: the training labels before corruption (for analysis); None: the labels are clean."""

    def __post_init__(self) -> None:
        if self.dynamics is None:
            self.dynamics = Dynamics.static(self.world.num_devices)
        if not self.availability_labels:
            self.availability_labels = availability_labels(self.scenario, self.dynamics)

    @property
    def num_params(self) -> int:
        """Model parameter count."""
        return int(self.init_params.size)


def train_spec(scenario: Scenario) -> TrainSpec:
    """The local-training job described by ``training:``."""
    t = scenario.training
    fields = t.spec_fields()  # the optimiser and training.clip_norm; a trainer's own clip norm, if set, replaces it
    fields.update((k, v) for k, v in t.trainer.spec_fields().items() if not (k == "clip_norm" and v is None))
    dp_sgd = scenario.privacy.dp_sgd  # sample-level DP-SGD in every plain job (hierfl.learn.dp_sgd)
    spec = TrainSpec(epochs=t.local_epochs, steps=t.steps, batch_size=t.batch_size, lr=t.lr,
                     momentum=t.momentum, weight_decay=t.weight_decay,
                     dp_sgd=None if dp_sgd is None else dp_sgd.spec(), **fields)
    if spec.method is not None:  # what the job method draws from the scenario seed (its own named streams)
        spec = dataclasses.replace(spec, method=spec.method.with_run_seed(lambda name: stream_seed(scenario.seed, name)))
    return spec


def _split_devices(scenario: Scenario, parts: list[np.ndarray]
                   ) -> tuple[list[np.ndarray], list[tuple[int, np.ndarray, np.ndarray | None]]]:
    """The world's devices' training rows, and the per-device evaluation sets (see :attr:`Built.eval_sets`)."""
    n, data = scenario.devices.count, scenario.data
    train = parts[:n]
    evals: list[tuple[int, np.ndarray, np.ndarray | None]] = []
    if data.local_test_fraction > 0:
        train = []
        for d, rows in enumerate(parts[:n]):
            kept, test = local_test_split(rows, data.local_test_fraction, stream(scenario.seed, "data.local_test", d))
            train.append(kept)
            if test.size:
                evals.append((d, kept, test))
    evals.extend((n + t, rows, None) for t, rows in enumerate(parts[n:]))
    return train, evals


def _method_vector(scenario: Scenario, params: np.ndarray, shape: tuple[int, ...], classes: int,
                   spec: TrainSpec, call: ModelCall = in_process) -> tuple[np.ndarray, int] | None:
    """The job method's initial vector and one message's size (:meth:`JobMethod.initial_vector`), or None when
    the method leaves both alone. Raises ConfigError at the trainer's layer key if its settings do not fit the model."""
    assert spec.method is not None
    try:
        made = spec.method.initial_vector(params, lambda: call(model_layout, scenario.model, shape, classes))
    except ValueError as exc:
        key = scenario.training.trainer.layer_key or "training.trainer"
        raise ConfigError([Problem(key, str(exc))]) from None
    if made is None:
        return None
    vector, sent = made
    return vector, model_bytes(sent)


def build(scenario: Scenario, source: str | None = None, model_call: ModelCall = in_process) -> Built:
    """Generate the data, split it, draw the profiles, assign edges and initialise the model.

    ``model_call`` runs the model's torch work (initial parameters, layout, FLOPs): here by
    default, in a Ray host actor for a Ray run (the results are the same bits: the initial
    parameters are a function of the seed only).

    Raises :class:`ConfigError` (with the key path) when the scenario is valid on its own
    but cannot be built, e.g. a partition that cannot give every device a sample.
    """
    seed, n = scenario.seed, scenario.devices.count
    total = n + scenario.data.test_devices  # held-out devices are cut from the same population
    try:
        dataset = scenario.data.dataset.build(total, stream(seed, "data.dataset"))
        private, public_rows = dataset, None
        if scenario.data.public is not None:  # disjoint from the private and test data
            dataset, private, public_rows = carve_public(dataset, scenario.data.public.size, stream(seed, "data.public"))
        parts = scenario.data.partition.split(private, total, stream(seed, "data.partition"))
    except DataError as exc:
        raise ConfigError([Problem("data." + exc.key, exc.message)], source) from None
    parts, eval_sets = _split_devices(scenario, [np.asarray(p, dtype=np.int64) for p in parts])
    clean_labels = None
    if scenario.data.label_noise is not None:  # the devices' rows only: test and public labels stay clean
        clean_labels = dataset.y_train
        dataset = dataclasses.replace(dataset, y_train=noisy_labels(scenario, dataset, parts))
    fits = [(key, cfg.check_dataset(tuple(dataset.input_shape), dataset.vocab_size))
            for key, cfg in [("model", scenario.model), *((f"models.{t}", m) for t, m in scenario.models.items())]]
    if any(reason is not None for _, reason in fits):
        raise ConfigError([Problem(key, reason) for key, reason in fits if reason is not None], source)
    shape, classes = tuple(dataset.input_shape), dataset.num_classes
    misfits = list(scenario.protocol.model_problems(lambda: model_call(model_layout, scenario.model, shape, classes)))
    # trainers and protocols with loops of their own on the module: the model features they cannot honour
    misfits += module_loop_problems(scenario, lambda cfg: model_call(model_features, cfg, shape, classes))
    if misfits:
        raise ConfigError(misfits, source)
    samples = np.array([len(p) for p in parts], dtype=np.int64)
    try:
        world = build_world(scenario, samples,
                            lambda tiers: device_models(scenario, tiers).forward_flops(model_call, shape, classes))
        world.num_classes = int(classes)
        world.sample_bytes = public_bytes(1, math.prod(shape), True)
        if scenario.protocol.needs_label_counts:  # class histograms at the aggregator (protocols that need them)
            y = dataset.y_train
            world.label_counts = np.stack([np.bincount(y[p], minlength=classes)[:classes] for p in parts]
                                          ).astype(np.int64)
        if dataset.train_domain is not None and dataset.domains is not None:  # own- and other-domain accuracy
            world.device_domain = np.array([int(np.bincount(dataset.train_domain[p], minlength=len(dataset.domains))
                                                .argmax()) for p in parts], dtype=np.int64)
            world.test_domains = dataset.test_ranges()
        pub = scenario.data.public
        if pub is not None and public_rows is not None:
            world.public = PublicData((int(public_rows[0]), int(public_rows[-1]) + 1), dataset.y_train[public_rows],
                                      pub.labelled, pub.placement,
                                      public_bytes(public_rows.size, math.prod(shape), pub.labelled))
        models = _device_models(scenario, world.tier, shape, classes, model_call)
        params = model_call(init_params, scenario.model, shape, classes, stream_seed(seed, "model.init"))
        # one message's size: what the trainer's messages carry (the model, or the model with a control vector)
        world.model_bytes = scenario.training.trainer.layout.nbytes(params.size)
        spec = train_spec(scenario)
        factor = scenario.training.trainer.work_factor(scenario.model, shape, classes, model_call)
        if spec.dp_sgd is not None:  # per-sample gradients, their norms and the noise (privacy.dp_sgd.costs)
            assert scenario.privacy.dp_sgd is not None
            factor *= scenario.privacy.dp_sgd.costs.work_factor(
                int(params.size), float(model_call(forward_flops, scenario.model, shape, classes)),
                int(scenario.training.batch_size or 1))
        if factor != 1.0:  # a heavier local loss (an extra pass of the trainer's loss) takes longer in virtual time
            spec = dataclasses.replace(spec, work_factor=factor)
        made = None if spec.method is None else _method_vector(scenario, params, shape, classes, spec, model_call)
        if made is not None:  # the method's own vector (values behind the model) and message (parameters kept home)
            params, world.model_bytes = made
        extra = None if spec.method is None else spec.method.initial_extra(math.prod(shape), scenario.devices.count)
        if extra is not None:  # the servers average more than the model: [model; extra]
            params = np.concatenate([params, extra])
            world.model_bytes = model_bytes(params.size)
        dynamics = build_dynamics(scenario, world)
    except ConfigError as exc:  # topology or trace problems found while building: name the scenario file
        raise ConfigError(exc.problems, source) from None
    return Built(scenario, dataset, parts, world, spec, params, dynamics, availability_labels(scenario, dynamics),
                 eval_sets, models, public_rows, clean_labels)


def noisy_labels(scenario: Scenario, dataset: Dataset, parts: list[np.ndarray]) -> np.ndarray:
    """``data.label_noise``: the training labels with each device's rows corrupted at its rate (streams
    ``label_noise.rate`` for the rates, ``("label_noise", device)`` for the flips)."""
    cfg = scenario.data.label_noise
    assert cfg is not None
    n = len(parts)
    rates = np.full(n, cfg.rate)
    if cfg.rate_high is not None:
        rates = stream(scenario.seed, "label_noise.rate").uniform(cfg.rate, cfg.rate_high, size=n)
    y = dataset.y_train.copy()
    for d, rows in enumerate(parts):
        y[rows] = flip_labels(y[rows], float(rates[d]), cfg.kind, dataset.num_classes,
                              stream(scenario.seed, "label_noise", d))
    return y


def _device_models(scenario: Scenario, tiers: np.ndarray, shape: tuple[int, ...], classes: int,
                   call: ModelCall) -> DeviceModels:
    """Which model each device runs; a weight-averaging protocol's refusal of differing layouts (ConfigError)."""
    models = device_models(scenario, tiers)
    if models.heterogeneous:
        layouts = [call(model_layout, cfg, shape, classes) for cfg in models.configs]
        problems = layout_problems(scenario, models, layouts, tiers)
        if problems:
            raise ConfigError(problems)
    return models
