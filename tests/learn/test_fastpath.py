"""Small-model fast path (scale, item 4).

* Always on, bit-identical: ``LocalTrainer.train`` (``ExactSGD``, ``LinearChain``, rows indexed
  once, results written in place) gives the same bits as the reference trainer (``torch.optim.SGD``
  and autograd: :class:`~hierfl.learn.reference.ReferenceTrainer`) on many random models, specs and seeds.
* Opt-in (``ModelSpec``'s fifth element, ``runtime.fast_path``): groups of jobs trained together;
  close to the exact path, and identical across executors and worker counts.
"""

from __future__ import annotations

from dataclasses import replace

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hierfl.core.work import TrainSpec
from hierfl.learn import LocalTrainer, init_params
from hierfl.learn.batched import GROUP_MAX, BatchedTrainer, JobGroups
from hierfl.learn.chain import LinearChain
from hierfl.learn.reference import ReferenceTrainer
from hierfl.models import CharLSTMConfig, CNNConfig, LogRegConfig, MLPConfig
from hierfl.runtime.executor import LocalExecutor, RunData
from hierfl.runtime.roles import DeviceHost, fast_path_of
from tests.conftest import tiny
from tests.determinism.test_determinism import metrics_without_wall


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _random_spec(rng: np.random.Generator) -> TrainSpec:
    epochs = rng.random() < 0.5
    return TrainSpec(epochs=int(rng.integers(1, 3)) if epochs else None,
                     steps=None if epochs else int(rng.integers(1, 7)),
                     batch_size=None if rng.random() < 0.2 else int(rng.integers(1, 12)),
                     lr=float(rng.choice([0.01, 0.1, 0.37])), momentum=float(rng.choice([0.0, 0.0, 0.5, 0.9])),
                     weight_decay=float(rng.choice([0.0, 0.0, 1e-3])), prox=float(rng.choice([0.0, 0.0, 0.3])),
                     mu=float(rng.choice([0.0, 0.0, 0.01])),
                     clip_norm=None if rng.random() < 0.6 else float(rng.choice([0.05, 1.0, 10.0])))


MODELS = [
    pytest.param(LogRegConfig(), (7,), 3, 60, id="logreg"),
    pytest.param(MLPConfig(hidden=[13, 5]), (9,), 4, 60, id="mlp-2"),
    pytest.param(MLPConfig(hidden=[31]), (20,), 10, 40, id="mlp-1"),
    pytest.param(CNNConfig(channels=(2, 3), hidden=8), (1, 8, 8), 5, 8, id="cnn"),
    pytest.param(CharLSTMConfig(vocab_size=11, embedding_dim=3, hidden=6, layers=2), (5,), 11, 8, id="char_lstm"),
]


@pytest.mark.parametrize(("cfg", "shape", "classes", "cases"), MODELS)
def test_trainer_is_bit_identical_to_reference(cfg, shape, classes, cases):
    rng = np.random.default_rng(hash(cfg.name) % 1000)
    new, ref = LocalTrainer(cfg, shape, classes), ReferenceTrainer(cfg, shape, classes)
    d = int(np.prod(shape))
    for _ in range(cases):
        n = int(rng.integers(1, 40))
        tokens = isinstance(cfg, CharLSTMConfig)
        x = (rng.integers(0, classes, (n, d)) if tokens else rng.standard_normal((n, d))).astype(np.float32)
        y = rng.integers(0, classes, n)
        spec = _random_spec(rng)
        params = init_params(cfg, shape, classes, int(rng.integers(0, 1000)))
        corr = rng.standard_normal(params.size).astype(np.float32) * 0.01 if rng.random() < 0.3 else None
        seed = int(rng.integers(0, 2**31))
        want, want_stats = ref.train(params, x, y, spec, seed, corr)
        got, got_stats = new.train(params, x, y, spec, seed, corr)
        assert np.array_equal(_bits(got), _bits(want)), (spec, n)
        assert got_stats == want_stats
        # the same samples read through rows of a bigger, read-only array, result written into `out`
        big_n = n + 5
        rows = rng.permutation(big_n)[:n]
        xb = np.zeros((big_n, d), dtype=np.float32)
        yb = np.zeros(big_n, dtype=np.int64)
        xb[rows], yb[rows] = x, y
        xb.setflags(write=False)
        yb.setflags(write=False)
        out = np.full(params.size, np.nan, dtype=np.float32)
        got2, stats2 = new.train(params, xb, yb, spec, seed, corr, rows=rows, out=out)
        assert got2 is out and np.array_equal(_bits(out), _bits(want)) and stats2 == want_stats


def test_linear_chain_gradients_are_autograd_bits():
    rng = np.random.default_rng(5)
    for _ in range(150):
        sizes = [int(rng.integers(1, 90))] + [int(rng.integers(1, 70)) for _ in range(int(rng.integers(0, 3)))]
        sizes.append(int(rng.integers(2, 12)))
        cfg = MLPConfig(hidden=sizes[1:-1]) if len(sizes) > 2 else LogRegConfig()
        module = cfg.build((sizes[0],), sizes[-1], seed=int(rng.integers(0, 100)))
        chain = LinearChain.of(module)
        assert chain is not None
        batch = int(rng.integers(1, 40))
        x = torch.randn(batch, sizes[0], generator=torch.Generator().manual_seed(int(rng.integers(0, 1000))))
        y = torch.from_numpy(rng.integers(0, sizes[-1], batch))
        loss = F.cross_entropy(module(x), y)
        loss.backward()
        with torch.no_grad():
            got_loss, grads = chain.loss_and_grads(x, y)
        assert torch.equal(got_loss, loss.detach())
        for p, g in zip(module.parameters(), grads):
            assert torch.equal(p.grad, g) and p.grad.stride() == g.stride()


def test_linear_chain_only_for_plain_chains():
    assert LinearChain.of(CNNConfig(channels=(2, 3), hidden=8).build((1, 8, 8), 3)) is None
    assert LinearChain.of(CharLSTMConfig(vocab_size=5, hidden=4, layers=1).build((3,), 5)) is None
    assert LinearChain.of(MLPConfig(hidden=[4]).build((3,), 2)) is not None


def _host_data(n_dev: int = 6, n: int = 12, d: int = 5, classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_dev * n, d), dtype=np.float32)
    y = rng.integers(0, classes, n_dev * n)
    parts = [np.arange(i * n, (i + 1) * n) for i in range(n_dev)]
    return x, y, parts


def test_host_train_many_is_train_per_job():
    x, y, parts = _host_data()
    model = (MLPConfig(hidden=[6]), (5,), 3, 1)
    host = DeviceHost(x, y, parts, model)
    spec = TrainSpec(epochs=2, batch_size=5, lr=0.1, momentum=0.5)
    p0 = init_params(model[0], (5,), 3, 1)
    p1 = init_params(model[0], (5,), 3, 2)
    out, stats = host.train_many([0, 3, 5], [7, 8, 9], spec, [0, 1, 0], [None, None, None], None, p0, p1)
    for k, (dev, seed, p) in enumerate([(0, 7, p0), (3, 8, p1), (5, 9, p0)]):
        want, st = host.train(dev, seed, spec, p)
        assert np.array_equal(_bits(out[k]), _bits(want)) and stats[k] == st


# -- opt-in batched fast path ------------------------------------------------------------------


def test_fast_path_is_off_by_default():
    x, y, parts = _host_data()
    assert not fast_path_of((LogRegConfig(), (5,), 3, 1))
    assert DeviceHost(x, y, parts, (LogRegConfig(), (5,), 3, 1)).batched is None
    assert DeviceHost(x, y, parts, (LogRegConfig(), (5,), 3, 1, True)).batched is not None
    assert DeviceHost(x, y, parts, (CNNConfig(channels=(2, 2), hidden=4), (1, 4, 4), 3, 1, True)).batched is None


@pytest.mark.parametrize("cfg", [LogRegConfig(), MLPConfig(hidden=[13, 5])], ids=["logreg", "mlp"])
def test_batched_group_is_close_to_exact(cfg):
    rng = np.random.default_rng(11)
    d, classes = 9, 4
    exact = LocalTrainer(cfg, (d,), classes)
    batched = BatchedTrainer.of(exact)
    assert batched is not None
    for _ in range(25):
        n, k = int(rng.integers(1, 30)), int(rng.integers(1, 6))
        x = rng.standard_normal((n * k + 3, d)).astype(np.float32)
        y = rng.integers(0, classes, n * k + 3)
        rows = [rng.permutation(n * k + 3)[:n] for _ in range(k)]
        spec = replace(_random_spec(rng), clip_norm=None)  # (clipped jobs are never grouped)
        params = [init_params(cfg, (d,), classes, int(rng.integers(0, 100))) for _ in range(k)]
        seeds = [int(s) for s in rng.integers(0, 1000, k)]
        out = np.empty((k, params[0].size), dtype=np.float32)
        stats = batched.train_group(params, x, y, rows, spec, seeds, out)
        for j in range(k):
            want, st = exact.train(params[j], x, y, spec, seeds[j], rows=rows[j])
            np.testing.assert_allclose(out[j], want, rtol=0, atol=1e-5)
            assert (st["steps"], st["samples"]) == (stats[j]["steps"], stats[j]["samples"])
            assert stats[j]["loss"] == pytest.approx(st["loss"], rel=1e-5, abs=1e-6)


def test_job_groups_rule():
    spec, other = TrainSpec(lr=0.1), TrainSpec(lr=0.2)
    groups = JobGroups()
    a, b, c = object(), object(), object()
    assert groups.add(a, spec, "g0") == (0, [])
    assert groups.add(b, spec, "g1") == (0, [])  # other start models, calls in between: same group
    assert groups.add(c, other, "g0") == (1, [a, b])  # another spec closes it
    d = object()
    assert groups.add(d, other, c) == (2, [c])  # starting from a result of the open group closes it
    assert groups.seal() == [d] and groups.seal() == []
    for k in range(GROUP_MAX):
        groups.add(k, spec, None)
    gid, closed = groups.add("next", spec, None)
    assert len(closed) == GROUP_MAX and gid == groups.open_id and groups.open == ["next"]


def test_local_executor_fast_path_groups_and_defers():
    x, y, parts = _host_data()
    model = (LogRegConfig(), (5,), 3, 1, True)
    init = init_params(LogRegConfig(), (5,), 3, 0)
    spec = TrainSpec(epochs=1, batch_size=4, lr=0.1)
    ex = LocalExecutor(RunData(x, y, parts, x[:10], y[:10], init, model, 0, spec))
    jobs = [ex.train(dev, 100 + dev, spec, init) for dev in range(4)]
    assert ex.handles.groups is not None and len(ex.handles.groups.open) == 4  # nothing trained yet
    st = ex.wait(SimpleNamespace(stats=jobs[2][1], params=jobs[2][0]))
    assert ex.handles.groups.open == [] and st["steps"] == 3
    host = DeviceHost(x, y, parts, model)
    want, _ = host.train_group([0, 1, 2, 3], [100, 101, 102, 103], spec, [init] * 4)
    for k, (handle, _, _) in enumerate(jobs):
        assert np.array_equal(_bits(ex.fetch(handle)), _bits(want[k]))


# -- whole runs: identical across executors and worker counts -----------------------------------


@pytest.fixture()
def fast_path(monkeypatch):
    """Turn the fast path on for runs in this test (what ``runtime.fast_path: true`` will wire)."""
    _force_fast_path(monkeypatch)


def _force_fast_path(monkeypatch):
    """Every executor made by ``run_scenario`` gets the fast path (the model spec's fifth element)."""
    import hierfl.driver.opening as run_mod

    real = run_mod.RunData

    def patched(*args, **kw):
        data = real(*args, **kw)
        return dataclasses.replace(data, model=(*data.model[:4], True))

    monkeypatch.setattr(run_mod, "RunData", patched)


_metrics = metrics_without_wall


def _many(**kw):
    return tiny(devices={"count": 12, "speed_sps": {"dist": "uniform", "low": 50, "high": 200}},
                data={"dataset": {"num_samples": 480}}, training={"epochs": 1, "momentum": 0.5}, **kw)


SCENARIOS = {
    "fedavg": lambda **kw: _many(protocol={"name": "fedavg", "fraction": 0.5}, stop={"rounds": 3}, **kw),
    "hierfavg": lambda **kw: _many(protocol={"name": "hierfavg", "kappa1": 2, "kappa2": 2},
                                   topology={"edge_servers": 2, "grouping": "random"}, stop={"rounds": 2}, **kw),
    "ahfl": lambda **kw: _many(protocol={"name": "ahfl"}, topology={"edge_servers": 2, "grouping": "random"},
                               stop={"rounds": 4}, **kw),
    "fedasync": lambda **kw: _many(protocol={"name": "fedasync", "concurrency": 6}, stop={"rounds": 15}, **kw),
    # SCAFFOLD keeps per-device state: its jobs are never grouped, even with the fast path on
    "fedavg-scaffold": lambda **kw: tiny(devices={"count": 12}, data={"dataset": {"num_samples": 480}},
                                         protocol={"name": "fedavg", "fraction": 0.5}, stop={"rounds": 3},
                                         training={"trainer": {"name": "scaffold"}}, **kw),
}


def test_fast_path_run_differs_only_slightly(tmp_path, monkeypatch):
    from hierfl.driver import run_scenario

    exact = run_scenario(SCENARIOS["fedavg"](), tmp_path / "exact")
    sizes = []
    group = DeviceHost.train_group_resident  # (the local executor's groups: results kept on the device)

    def spy(self, devices, *args, **kw):
        sizes.append(len(devices))
        return group(self, devices, *args, **kw)

    monkeypatch.setattr(DeviceHost, "train_group_resident", spy)
    _force_fast_path(monkeypatch)
    fast = run_scenario(SCENARIOS["fedavg"](), tmp_path / "fast")
    assert sizes and max(sizes) == 6  # each round's six jobs trained as one group
    assert not np.array_equal(fast.final_params, exact.final_params)
    np.testing.assert_allclose(fast.final_params, exact.final_params, rtol=0, atol=1e-4)


@pytest.mark.ray
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fast_path_local_vs_ray_one_and_two_hosts(tmp_path, ray_session, fast_path, name):
    from hierfl.driver import run_scenario

    make = SCENARIOS[name]
    local = run_scenario(make(), tmp_path / "local")
    ref = _metrics(tmp_path / "local")
    for workers in (1, 2):
        res = run_scenario(make(runtime={"executor": "ray", "workers": workers}), tmp_path / f"ray{workers}")
        assert res.summary["workers"] == workers
        assert _metrics(tmp_path / f"ray{workers}") == ref
        assert np.array_equal(res.final_params, local.final_params)
