"""Local optimisers (``training.optimizer``), learning-rate schedules (``training.lr_schedule``) and gradient
clipping (``training.clip_norm``) on both training paths: one job at a time and batched."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hierfl.config.errors import ConfigError
from hierfl.core.work import TrainSpec
from hierfl.learn import LocalTrainer, init_params
from hierfl.learn.batched import BatchedTrainer
from hierfl.learn.reference import ReferenceTrainer
from hierfl.learn.vmapped import VmapTrainer
from hierfl.models import CNNConfig, LogRegConfig, MLPConfig
from hierfl.learn.schedule import LRScheduleConfig


def _data(n: int, features: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = rng.integers(0, classes, size=n)
    return x, y


def _plain_adam_rounds(cfg, shape, classes, start, x, y, lr0, gamma, rounds, epochs, clip) -> np.ndarray:
    """The reference transcription: a plain loop, a fresh ``torch.optim.Adam`` per round at ``lr0·gamma^r``,
    full-batch steps (no data order to agree on), ``clip_grad_norm_`` before each step."""
    module = cfg.build(shape, classes)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(start.copy()), module.parameters())
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    for r in range(rounds):
        opt = torch.optim.Adam(module.parameters(), lr=lr0 * gamma ** r, betas=(0.8, 0.99), eps=1e-7)
        for _ in range(epochs):
            opt.zero_grad()
            F.cross_entropy(module(xt), yt).backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
            opt.step()
    return torch.nn.utils.parameters_to_vector(module.parameters()).detach().numpy()


@pytest.mark.parametrize("cfg", [LogRegConfig(), MLPConfig(hidden=[6])], ids=["logreg", "mlp"])
def test_adam_exponential_schedule_and_clipping_match_a_plain_torch_loop(cfg):
    """Done-when: Adam with a per-round exponential decay and clipping reproduces the plain loop to 1e-6, one job
    at a time (LocalTrainer) and batched (the chain trainer and the vmap trainer, two jobs per group)."""
    shape, classes, n = (5,), 3, 24
    x, y = _data(n, 5, classes, 1)
    start = init_params(cfg, shape, classes, seed=3)
    schedule = LRScheduleConfig(name="exponential", gamma=0.7)
    lr0, rounds, epochs, clip = 0.05, 3, 4, 0.3
    want = _plain_adam_rounds(cfg, shape, classes, start, x, y, lr0, 0.7, rounds, epochs, clip)
    trainer = LocalTrainer(cfg, shape, classes)
    vmap = VmapTrainer(trainer)
    chain = BatchedTrainer.of(trainer)
    one, grouped, chained = start.copy(), start.copy(), start.copy()
    rows = np.arange(n)
    for r in range(rounds):
        spec = TrainSpec(epochs=epochs, batch_size=None, lr=lr0 * schedule.scale(r), optimizer="adam",
                         betas=(0.8, 0.99), eps=1e-7, clip_norm=clip)
        one, _ = trainer.train(one, x, y, spec, seed=r)
        out = np.empty((2, start.size), dtype=np.float32)
        vmap.train_group([grouped, grouped], x, y, [rows, rows], spec, [r, r], out)
        assert np.array_equal(out[0], out[1])
        grouped = out[0].copy()
        if chain is not None:
            chain.train_group([chained, chained], x, y, [rows, rows], spec, [r, r], out)
            chained = out[0].copy()
    assert np.abs(want - start).max() > 1e-2  # it trained
    np.testing.assert_allclose(one, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(grouped, want, rtol=0, atol=1e-6)
    if chain is not None:
        np.testing.assert_allclose(chained, want, rtol=0, atol=1e-6)


SPECS = [
    pytest.param(dict(optimizer="sgd", momentum=0.9, nesterov=True, weight_decay=1e-3), id="sgd-nesterov"),
    pytest.param(dict(optimizer="sgd", momentum=0.5, clip_norm=0.2, prox=0.1), id="sgd-clip-prox"),
    pytest.param(dict(optimizer="adam", weight_decay=1e-2, clip_norm=0.5), id="adam-l2-clip"),
    pytest.param(dict(optimizer="adamw", weight_decay=0.1, betas=(0.5, 0.9)), id="adamw"),
]
MODELS = [pytest.param(MLPConfig(hidden=[7]), (6,), 3, id="mlp"),
          pytest.param(CNNConfig(channels=(2, 2), hidden=4), (1, 4, 4), 3, id="cnn")]


@pytest.mark.parametrize("fields", SPECS)
@pytest.mark.parametrize(("cfg", "shape", "classes"), MODELS)
def test_one_by_one_is_torch_and_batched_agrees(cfg, shape, classes, fields):
    """Per optimiser: the one-job path is the reference trainer (a fresh ``torch.optim`` optimiser) in every bit;
    the batched trainers agree with it within float tolerance, for jobs of unequal sizes and step counts."""
    features = int(np.prod(shape))
    x, y = _data(40, features, classes, 2)
    spec = TrainSpec(epochs=2, batch_size=8, lr=0.05, **fields)
    trainer = LocalTrainer(cfg, shape, classes)
    ref = ReferenceTrainer(cfg, shape, classes)
    starts = [init_params(cfg, shape, classes, seed=s) for s in (1, 2, 3)]
    rows = [np.arange(0, 40, 2), np.arange(1, 40, 3), np.arange(5, 35)]
    seeds = [11, 12, 13]
    singles = []
    for p, r, s in zip(starts, rows, seeds):
        got, _ = trainer.train(p, x, y, spec, s, rows=r)
        want, _ = ref.train(p, x[r], y[r], spec, s)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert np.abs(got - p).max() > 1e-3
        singles.append(got)
    out = np.empty((3, starts[0].size), dtype=np.float32)
    VmapTrainer(trainer).train_group(starts, x, y, rows, spec, seeds, out)
    np.testing.assert_allclose(out, np.stack(singles), rtol=1e-5, atol=2e-6)
    chain = BatchedTrainer.of(trainer)
    if chain is not None:  # (equal sample counts: the chain trainer's groups)
        same = [rows[0], rows[0][::-1].copy()]
        chain.train_group(starts[:2], x, y, same, spec, seeds[:2], out[:2])
        for k in range(2):
            alone, _ = trainer.train(starts[k], x, y, spec, seeds[k], rows=same[k])
            np.testing.assert_allclose(out[k], alone, rtol=1e-5, atol=2e-6)


def test_batched_runs_are_bit_identical_run_to_run():
    cfg, shape, classes = MLPConfig(hidden=[5]), (4,), 3
    x, y = _data(30, 4, classes, 4)
    spec = TrainSpec(epochs=2, batch_size=4, lr=0.02, optimizer="adamw", weight_decay=0.05, clip_norm=0.1)
    starts = [init_params(cfg, shape, classes, seed=s) for s in (1, 2)]
    rows = [np.arange(0, 30, 2), np.arange(3, 30)]
    outs = []
    for _ in range(2):
        trainer = LocalTrainer(cfg, shape, classes)
        out = np.empty((2, starts[0].size), dtype=np.float32)
        VmapTrainer(trainer).train_group(starts, x, y, rows, spec, [5, 6], out)
        outs.append(out)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


def test_schedule_factors():
    assert LRScheduleConfig().scale(7) == 1.0
    assert LRScheduleConfig(name="exponential", gamma=0.998).scale(10) == pytest.approx(0.998 ** 10, rel=1e-15)
    step = LRScheduleConfig(name="step", every=3, factor=0.5)
    assert [step.scale(r) for r in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    cos = LRScheduleConfig(name="cosine", rounds=4, floor=0.2)
    assert cos.scale(0) == pytest.approx(1.0)
    assert cos.scale(2) == pytest.approx(0.6)
    assert cos.scale(4) == pytest.approx(0.2) and cos.scale(40) == pytest.approx(0.2)
    assert LRScheduleConfig.model_validate("constant").constant
    assert LRScheduleConfig(name="exponential").scale(3) == pytest.approx(0.998 ** 3)  # (the design default)


def _load(training: dict) -> None:
    from hierfl.scenario.loader import validate_raw

    validate_raw({"name": "t", "seed": 0, "data": {"dataset": {"name": "digits"}},
                        "model": {"name": "logreg"}, "devices": {"count": 4}, "protocol": {"name": "fedavg"},
                        "training": training, "stop": {"rounds": 1}})


@pytest.mark.parametrize(("training", "key"), [
    ({"optimizer": "rmsprop"}, "training.optimizer"),
    ({"optimizer": "sgd", "betas": [0.5, 0.9]}, "training.betas"),
    ({"optimizer": "adam", "momentum": 0.9}, "training.momentum"),
    ({"optimizer": "adam", "nesterov": True}, "training.nesterov"),
    ({"optimizer": "adam", "betas": [0.9, 1.0]}, "training"),
    ({"nesterov": True}, "training.nesterov"),
    ({"clip_norm": 0}, "training.clip_norm"),
    ({"lr_schedule": {"name": "cosine", "rounds": 0}}, "training.lr_schedule.rounds"),
    ({"lr_schedule": {"name": "cosine", "floor": 1.0}}, "training.lr_schedule.floor"),
    ({"lr_schedule": {"name": "exponential", "gamma": 1.5}}, "training.lr_schedule.gamma"),
    ({"lr_schedule": {"name": "step", "every": 2, "factor": 0.5, "gamma": 0.9}}, "training.lr_schedule.gamma"),
    ({"lr_schedule": "linear"}, "training.lr_schedule.name"),
    ({"clip_norm": 5, "trainer": {"name": "feddc"}}, "training"),
    ({"optimizer_state": "per_device", "trainer": {"name": "scaffold"}}, "training"),
    ({"optimizer_state": "global"}, "training.optimizer_state"),
])
def test_bad_values_are_refused_with_the_key_path(training, key):
    with pytest.raises(ConfigError) as err:
        _load(training)
    assert any(p.path == key for p in err.value.problems), [p.path for p in err.value.problems]


def _recorded_rates(monkeypatch, scenario, out) -> tuple[list[tuple[int, float]], np.ndarray]:
    """Run ``scenario`` in process; ``(cloud aggregations when each job started, its lr)`` and the final model."""
    from hierfl.driver import run_scenario
    from hierfl.driver.jobs import Jobs
    from hierfl.runtime.local_executor import LocalExecutor

    seen: list[tuple[int, float]] = []
    jobs: list[Jobs] = []
    start_training, train = Jobs.start_training, LocalExecutor.train

    def spy_start(self, *args, **kwargs):
        jobs[:] = [self]
        return start_training(self, *args, **kwargs)

    def spy_train(self, device, seed, spec, params, control=None):
        seen.append((int(jobs[0].counters["cloud_aggregations"]), spec.lr))
        return train(self, device, seed, spec, params, control)

    monkeypatch.setattr(Jobs, "start_training", spy_start)
    monkeypatch.setattr(LocalExecutor, "train", spy_train)
    result = run_scenario(scenario, out)
    return seen, result.final_params


def test_each_job_trains_at_its_rounds_rate_and_runs_repeat_bit_for_bit(tmp_path, monkeypatch):
    from tests.conftest import tiny

    training = {"lr": 0.05, "optimizer": "adam", "clip_norm": 0.5, "lr_schedule": {"name": "step", "every": 1,
                                                                                   "factor": 0.5}}
    scenario = tiny(training=training, stop={"rounds": 3})
    seen, first = _recorded_rates(monkeypatch, scenario, tmp_path / "a")
    assert sorted({r for r, _ in seen}) == [0, 1, 2]
    assert all(lr == 0.05 * 0.5 ** r for r, lr in seen), seen
    _, again = _recorded_rates(monkeypatch, scenario, tmp_path / "b")
    assert np.array_equal(first.view(np.uint32), again.view(np.uint32))
    # asynchronous: a job's round is the cloud model's version when it starts
    seen, _ = _recorded_rates(monkeypatch, tiny(training=training, protocol={"name": "fedasync"},
                                                stop={"rounds": 6}), tmp_path / "c")
    assert len({r for r, _ in seen}) >= 2 and all(lr == 0.05 * 0.5 ** r for r, lr in seen), seen


@pytest.mark.parametrize("fields", [dict(optimizer="adam", clip_norm=0.5), dict(optimizer="sgd", momentum=0.9,
                                                                                 nesterov=True)], ids=["adam", "sgd"])
def test_a_devices_kept_state_is_one_torch_optimizer_across_its_jobs(fields):
    """``optimizer_state: device``: two jobs of a device (the second at a lower, scheduled rate) continue one
    ``torch.optim`` optimizer (to 1e-6: the job's full batch is summed in its permuted order); a fresh state per
    job gives another result."""
    cfg, shape, classes = MLPConfig(hidden=[6]), (5,), 3
    x, y = _data(20, 5, classes, 7)
    start = init_params(cfg, shape, classes, seed=1)
    module = cfg.build(shape, classes)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(start.copy()), module.parameters())
    spec = TrainSpec(epochs=3, batch_size=None, lr=0.05, optimizer_state="device", **fields)
    from hierfl.learn.optim import torch_optimizer

    opt = torch_optimizer(list(module.parameters()), spec)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    for lr in (0.05, 0.02):
        for group in opt.param_groups:
            group["lr"] = lr
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(module(xt), yt).backward()
            if spec.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(module.parameters(), spec.clip_norm, foreach=False)
            opt.step()
    want = torch.nn.utils.parameters_to_vector(module.parameters()).detach().numpy()
    trainer = LocalTrainer(cfg, shape, classes)
    kept: dict = {}
    first, _ = trainer.train(start, x, y, spec, 0, opt_state=kept)
    assert kept  # the job left its state
    got, _ = trainer.train(first, x, y, TrainSpec(**{**spec.__dict__, "lr": 0.02}), 0, opt_state=kept)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # (full batch in a permuted order: last bits)
    fresh, _ = trainer.train(first, x, y, TrainSpec(**{**spec.__dict__, "lr": 0.02}), 0)
    assert np.abs(fresh - got).max() > 1e-4


def test_per_device_state_lives_in_the_host_and_the_run_repeats(tmp_path):
    from hierfl.driver import run_scenario
    from tests.conftest import tiny

    training = {"lr": 0.05, "optimizer": "adam", "optimizer_state": "per_device"}
    a = run_scenario(tiny(training=training), tmp_path / "a")
    b = run_scenario(tiny(training=training), tmp_path / "b")
    assert np.array_equal(a.final_params.view(np.uint32), b.final_params.view(np.uint32))
    fresh = run_scenario(tiny(training={"lr": 0.05, "optimizer": "adam"}), tmp_path / "c")
    assert np.abs(fresh.final_params - a.final_params).max() > 1e-6
    assert a.summary["device_state"]["bytes"] > 0, a.summary.get("device_state")
