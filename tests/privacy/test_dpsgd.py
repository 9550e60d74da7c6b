"""Sample-level DP-SGD (``privacy.dp_sgd``): per-sample clipping against a plain loop, the batched path against
the one-job-at-a-time path, the batch sampling, each device's ε against dp-accounting computed here, the ε
budget, resume, emulated cost, and the refused settings."""

from __future__ import annotations

import copy
import csv
import functools
import json
from pathlib import Path

import dp_accounting as dpa
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dp_accounting import rdp

from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.core.work import DpSgdSpec, TrainSpec
from hierfl.driver import resume_run, run_scenario
from hierfl.learn.dp_sgd import dp_batches, draw_noise, noise_generator
from hierfl.learn.local import LocalTrainer, init_params
from hierfl.learn.vmapped import VmapTrainer
from hierfl.models import MLPConfig
from hierfl.scenario.loader import deep_merge, load_scenario, validate_raw
from tests.conftest import TINY
from tests.driver.test_recovery import _stop_at, assert_same_run

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "dpsgd_fedavg.yaml"
SHORT = ["stop.rounds=2", "stop.epsilon=null"]  # the golden limits: 2 rounds, 5 jobs each
TOL = 1e-5  # batched (vmap over jobs around vmap over samples) vs alone: float32 sums in another order

CFG, SHAPE, CLASSES = MLPConfig(hidden=[8]), (6,), 3
SIZES, SEEDS = [12, 7, 12, 3], [21, 22, 23, 24]  # unequal: b = min(4, n) differs, padded in the group


def _data() -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6)).astype(np.float32) * 3.0  # large inputs: most per-sample gradients get clipped
    y = rng.integers(0, CLASSES, 40)
    return x, y, [rng.choice(40, s, replace=False) for s in SIZES]


def _spec(sampling: str, z: float = 1.0, clip: float = 0.5, **kw) -> TrainSpec:
    return TrainSpec(epochs=None, steps=kw.pop("steps", 4), batch_size=4, lr=kw.pop("lr", 0.1),
                     dp_sgd=DpSgdSpec(z, clip, sampling), **kw)


# -- the per-sample arithmetic ---------------------------------------------------------------------------------

def test_per_sample_clipping_equals_a_plain_backward_loop():
    """Each step of the trainer = a reference loop: one ``loss.backward()`` per sample, clip, sum, the same noise."""
    x, y, rows = _data()
    spec = _spec("fixed_size", z=0.7, clip=0.5, steps=3, lr=0.5)
    trainer = LocalTrainer(CFG, SHAPE, CLASSES)
    p0 = init_params(CFG, SHAPE, CLASSES, 1)
    got, stats = trainer.train(p0, x, y, spec, 5, rows=rows[0])

    module = CFG.build(SHAPE, CLASSES)
    params = list(module.parameters())
    torch.nn.utils.vector_to_parameters(torch.from_numpy(p0.copy()), params)
    gen, clipped = noise_generator(5), 0
    for pos in dp_batches(rows[0].size, spec, 5):
        total = torch.zeros(p0.size)
        for i in rows[0][pos]:
            module.zero_grad()
            F.cross_entropy(module(torch.from_numpy(x[i:i + 1])), torch.tensor([int(y[i])])).backward()
            g = torch.cat([p.grad.reshape(-1) for p in params])
            norm = float(g.norm())
            clipped += norm > 0.5
            total += g * min(1.0, 0.5 / (norm + 1e-6))
        total += draw_noise(gen, p0.size, 0.7 * 0.5)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.nn.utils.parameters_to_vector(params) - 0.5 * total / 4, params)
    ref = torch.nn.utils.parameters_to_vector(params).detach().numpy()
    assert clipped > 0  # the check covers the clip, not just the sum
    assert np.abs(got - ref).max() <= 1e-6
    assert stats["steps"] == 3 and stats["samples"] == 12  # fixed size: b = 4 per step


@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
def test_batched_equals_alone_and_both_repeat_bit_for_bit(sampling):
    x, y, rows = _data()
    spec = _spec(sampling, momentum=0.9)
    trainer = LocalTrainer(CFG, SHAPE, CLASSES)
    starts = [init_params(CFG, SHAPE, CLASSES, 1) + np.float32(0.01 * k) for k in range(len(SIZES))]
    groups = []
    for _ in range(2):
        out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
        stats = VmapTrainer(trainer).train_group(starts, x, y, rows, spec, SEEDS, out)
        groups.append((out, stats))
    assert np.array_equal(groups[0][0].view(np.uint32), groups[1][0].view(np.uint32))
    plain = dict(spec.__dict__, dp_sgd=None)
    for k in range(len(SIZES)):
        alone, st = trainer.train(starts[k], x, y, spec, SEEDS[k], rows=rows[k])
        again, _ = trainer.train(starts[k], x, y, spec, SEEDS[k], rows=rows[k])
        assert np.array_equal(alone.view(np.uint32), again.view(np.uint32))
        assert np.abs(groups[0][0][k] - alone).max() <= TOL, k
        assert groups[0][1][k]["samples"] == st["samples"] and groups[0][1][k]["loss"] == pytest.approx(st["loss"],
                                                                                                         abs=TOL)
        # the noise and the clip are really applied: plain SGD on the same seed lands elsewhere
        sgd, _ = trainer.train(starts[k], x, y, TrainSpec(**plain), SEEDS[k], rows=rows[k])
        assert np.abs(sgd - alone).max() > 1e-3


def test_batches_are_drawn_independently_every_step():
    fixed = dp_batches(100, _spec("fixed_size", steps=200), 3)
    assert all(p.size == 4 and np.unique(p).size == 4 for p in fixed)
    poisson = dp_batches(100, _spec("poisson", steps=2000), 3)
    sizes = np.array([p.size for p in poisson])
    assert 3.8 < sizes.mean() < 4.2 and (sizes == 0).any() and sizes.max() > 8  # q = b/n = 0.04 per example
    counts = np.bincount(np.concatenate(poisson), minlength=100)
    assert counts.min() > 40 and counts.max() < 130  # every example ~ 80 times: no epoch structure


# -- accounting, budget, resume --------------------------------------------------------------------------------

@functools.cache
def _eps(steps: int, n: int = 100, b: int = 10, z: float = 2.0) -> float:
    """Fixed-size batches of b of n without replacement; replace-one: the sum's sensitivity is 2C, so noise zC
    is a Gaussian mechanism of multiplier z/2."""
    if steps == 0:
        return 0.0
    acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(z / 2)), steps))
    return acc.get_epsilon(n ** -1.1)


def _devices(run: Path) -> list[dict]:
    with (run / "devices.csv").open() as fh:
        return list(csv.DictReader(fh))


def _evals(run: Path) -> list[dict]:
    return [d for d in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if d.get("event") == "eval"]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dpsgd") / "run"
    run_scenario(load_scenario(str(SCENARIO), overrides=SHORT), out)
    return out


def test_each_device_s_epsilon_is_dp_accounting_s_for_its_steps(shipped):
    block = json.loads((shipped / "summary.json").read_text())["privacy"]
    assert block["mechanism"] == "dp_sgd" and block["delta"] == pytest.approx(100 ** -1.1)
    rows = _devices(shipped)
    steps = [int(r["dp_steps"]) for r in rows]
    assert sum(steps) == 10 * block["jobs"] == 100  # 2 rounds x 5 jobs x 10 steps
    for r, s in zip(rows, steps):
        assert float(r["dp_epsilon"]) == pytest.approx(_eps(s), rel=1e-5)
    assert block["epsilon"] == pytest.approx(_eps(max(steps)), rel=1e-9)
    lines = _evals(shipped)
    assert lines[0]["epsilon"] == 0.0 and lines[-1]["epsilon"] == block["epsilon"] > 0


def test_poisson_sampling_is_accounted_as_poisson(tmp_path):
    out = tmp_path / "poisson"
    run_scenario(load_scenario(str(SCENARIO), overrides=[*SHORT, "stop.rounds=1",
                                                         "privacy.dp_sgd.batch_sampling=poisson"]), out)
    block = json.loads((out / "summary.json").read_text())["privacy"]
    acc = rdp.RdpAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(2.0)), 10))
    assert block["epsilon"] == pytest.approx(acc.get_epsilon(100 ** -1.1), rel=1e-9)
    assert block["epsilon"] < _eps(10)  # add-or-remove with sensitivity C: far less than replace-one's 2C


def test_the_budget_ends_the_run_before_a_device_passes_it(tmp_path):
    out = tmp_path / "budget"
    run_scenario(load_scenario(str(SCENARIO), overrides=["stop.epsilon=3.0"]), out)  # one job: 2.44, two: 3.43
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "epsilon"
    steps = [int(r["dp_steps"]) for r in _devices(out)]
    assert max(steps) == 10 and summary["privacy"]["epsilon"] == pytest.approx(_eps(10))
    assert _eps(10) <= 3.0 < _eps(20)


def test_a_resumed_run_reports_the_same_epsilon(tmp_path):
    overrides = ["stop.rounds=3", "stop.epsilon=null", "runtime.checkpoint={every_cloud_aggregations: 1, every_s: null}"]
    run_scenario(load_scenario(str(SCENARIO), overrides=overrides), tmp_path / "ref")
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(str(SCENARIO), overrides=overrides), out, progress=_stop_at(2))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(tmp_path / "ref", out)  # devices.csv (each device's ε) and every eval line's ε included
    assert json.loads((out / "summary.json").read_text())["privacy"]["epsilon"] > 0


def test_emulated_time_is_charged_from_sizes_not_values(tmp_path):
    times = []
    for z in ("2.0", "5.0"):
        out = tmp_path / z
        run_scenario(load_scenario(str(SCENARIO), overrides=[*SHORT, "stop.rounds=1", f"privacy.dp_sgd.noise_multiplier={z}"]), out)
        times.append(json.loads((out / "summary.json").read_text())["totals"]["compute_s"])
    assert times[0] == times[1]  # the noise level changes the model, never the clock
    plain = tmp_path / "plain"
    run_scenario(load_scenario(str(SCENARIO), overrides=[*SHORT, "stop.rounds=1", "privacy.dp_sgd=null"]), plain)
    base = json.loads((plain / "summary.json").read_text())["totals"]["compute_s"]
    # mlp 10-16-4: P = 244, F = 2·(160 + 64) = 448 FLOPs; factor 1 + (3·244 + 21·244/10) / (0.25·3·448)
    factor = 1.0 + (3 * 244 + 21 * 244 / 10) / (0.25 * 3 * 448)
    assert times[0] == pytest.approx(base * factor, rel=1e-9)


# -- refused settings ------------------------------------------------------------------------------------------

DPSGD = {"privacy": {"dp_sgd": {"noise_multiplier": 1.0, "clip": 1.0}}, "training": {"epochs": None, "steps": 3}}


@pytest.mark.parametrize(("override", "path"), [
    ({"training": {"steps": None, "epochs": 1}}, "training.epochs"),
    ({"privacy": {"dp_sgd": {"accountant": "pld"}}}, "privacy.dp_sgd.accountant"),
    ({"privacy": {"dp_sgd": {"delta": 1.5}}}, "privacy.dp_sgd.delta"),
    ({"privacy": {"dp": {"mode": "central"}}, "protocol": {"weighting": "uniform"}}, "privacy.dp_sgd"),
    ({"training": {"trainer": "scaffold"}}, "training.trainer"),
    ({"training": {"trainer": "none"}}, "training.trainer"),
    ({"runtime": {"precision": "bf16"}}, "runtime.precision"),
    ({"protocol": {"name": "fedmd"}}, "protocol.name"),
    ({"protocol": {"name": "fedhisyn"}}, "protocol.name"),  # protocols whose jobs have a shape of their own
    ({"protocol": {"name": "wscc"}}, "protocol.name"),
    ({"protocol": {"name": "fedch"}, "topology": {"edge_servers": 2}}, "protocol.name"),
    ({"privacy": {"dp_sgd": {"batch_sampling": "shuffle"}}}, "privacy.dp_sgd.batch_sampling"),
])
def test_refused_settings_name_their_key(override, path):
    raw = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(DPSGD)), override)
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert any(p.path == path for p in info.value.problems), info.value.report()


def test_the_cli_refuses_bad_values_and_models_with_exit_status_2(tmp_path, capsys):
    bad = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(DPSGD)), {"privacy": {"dp_sgd": {"clip": -1}}})
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(bad))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "privacy.dp_sgd.clip" in err and "Traceback" not in err
    # a model whose per-sample gradients would not bound one example (batch norm) and that draws dropout masks:
    # refused when the run is built
    cnn = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(DPSGD)),
                     {"model": {"name": "torch", "factory": "hierfl.models.nets:bn_mlp", "kwargs": {"hidden": 8}}})
    path.write_text(json.dumps(cnn))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "privacy.dp_sgd" in err and "running statistics" in err and "dropout" in err and "Traceback" not in err


def test_a_job_without_the_run_s_dp_sgd_stops_the_run():
    """A protocol that builds a plain training spec of its own would train unprotected: the ledger refuses it."""
    from hierfl.privacy.config_dp_sgd import DpSgdConfig
    from hierfl.privacy.driver_dp_sgd import DpSgdLedger

    ledger = DpSgdLedger(DpSgdConfig(noise_multiplier=2.0), np.array([100, 100]), None)
    assert ledger.job(0, TrainSpec(epochs=None, steps=10, batch_size=10, dp_sgd=DpSgdSpec(2.0, 1.0)))
    assert ledger.epsilon() == pytest.approx(_eps(10))
    with pytest.raises(ValueError, match="without privacy.dp_sgd"):
        ledger.job(1, TrainSpec(epochs=None, steps=10, batch_size=10))
