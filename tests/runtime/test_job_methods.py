"""The job-method API (:mod:`hierfl.core.method`): a method's own device job, run by the host without the host
naming the method; its per-device state, result width and cost; and the defects fixed while moving the shipped
methods onto it (grouped jobs with a shared set read their own labels; FedDC's edge weights follow re-grouping;
FedDC under a robust rule is refused)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pytest

from hierfl.core.message import MODEL, MessageLayout, Part
from hierfl.core.method import JobContext, JobMethod, StateStore, runner
from hierfl.core.shared import SharedData
from hierfl.core.work import TrainSpec, work_samples
from hierfl.models import LogRegConfig
from hierfl.runtime.roles import DeviceHost
from tests.learn.test_local_training import C, D, _tiny_data


NUDGED = MessageLayout((Part(MODEL), Part("update")))


@dataclass(frozen=True)
class MomentumNudge(JobMethod):
    """A user's job method: plain SGD, then the result moves by ``beta`` times the device's last update (kept as
    per-device state ``last``); it returns the model and the update (layout ``NUDGED``) and charges an extra half pass per sample."""

    beta: float = 0.5
    keeps_device_state: ClassVar[bool] = True
    state_names: ClassVar[tuple[str, ...]] = ("last",)
    custom_work: ClassVar[bool] = True
    layout: ClassVar[MessageLayout] = NUDGED

    def work_samples(self, n: int, spec: TrainSpec) -> float:
        return 1.5 * super().work_samples(n, spec)

    def run(self, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
        plain = replace(ctx.spec, method=None)
        new, stats = ctx.trainer.train(ctx.params, ctx.x, ctx.y, plain, ctx.seed, rows=ctx.rows)
        last = ctx.state.get(ctx.device, "last", new)
        moved = (new + self.beta * last).astype(np.float32)
        update = (moved - ctx.params).astype(np.float32)
        ctx.state.put(ctx.device, last=update)
        return ctx.finish(NUDGED.join({MODEL: moved, "update": update}), stats)


def _host(parts: list[np.ndarray], fast: bool = False) -> tuple[DeviceHost, np.ndarray, np.ndarray, np.ndarray]:
    x, y, theta = _tiny_data()
    return DeviceHost(x, y, parts, (LogRegConfig(), (D,), C, 1, fast)), x, y, theta


def test_user_job_method_runs_on_the_host_with_state_and_width():
    host, x, y, theta = _host([np.arange(0, 3), np.arange(3, 5)])
    spec = TrainSpec(epochs=1, batch_size=2, lr=0.2, method=MomentumNudge(0.5))
    p = theta.size
    assert spec.keeps_device_state and host.result_width(spec) == 2 * p
    first, stats = host.train(0, 3, spec, theta)
    plain, _ = host.trainer.train(theta, x, y, TrainSpec(epochs=1, batch_size=2, lr=0.2), 3, rows=np.arange(0, 3))
    np.testing.assert_array_equal(first[:p], plain)  # state starts at zeros: no nudge on the first job
    np.testing.assert_array_equal(first[p:], (plain - theta).astype(np.float32))
    assert stats["steps"] == 2
    second, _ = host.train(0, 4, spec, theta)
    plain2, _ = host.trainer.train(theta, x, y, TrainSpec(epochs=1, batch_size=2, lr=0.2), 4, rows=np.arange(0, 3))
    np.testing.assert_allclose(second[:p], plain2 + 0.5 * first[p:], rtol=0, atol=1e-7)
    # the state is the host's: exported for a checkpoint, measured, forgotten on a reset; device 1 has none
    state = host.export_state()
    assert set(state) == {0} and set(state[0]) == {"last"}
    assert host.state_bytes() == (1, 4 * p)
    host.reset_devices([0])
    again, _ = host.train(0, 3, spec, theta)
    np.testing.assert_array_equal(again, first)
    # a result written into a row of a batch of results
    out = np.zeros((2, 2 * p), dtype=np.float32)
    host.reset_devices([0])
    host.train(0, 3, spec, theta, out=out[1])
    np.testing.assert_array_equal(out[1], first)


def test_job_method_cost_and_registered_runner():
    spec = TrainSpec(epochs=2, batch_size=8, method=MomentumNudge())
    assert work_samples(30, spec) == 1.5 * 60.0
    assert work_samples(30, replace(spec, method=None)) == 60.0

    @dataclass(frozen=True)
    class Doubling(JobMethod):
        """Settings in a pure module; the runner registered apart (as a shipped method's package does)."""

    @runner(Doubling)
    def run_doubling(method: Doubling, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
        return ctx.finish(2 * np.asarray(ctx.params, dtype=np.float32), {"steps": 0.0})

    host, _, _, theta = _host([np.arange(5)])
    out, stats = host.train(0, 1, TrainSpec(method=Doubling()), theta)
    np.testing.assert_array_equal(out, 2 * theta)
    with pytest.raises(ValueError, match="already registered"):
        runner(Doubling)(lambda m, c: None)

    @dataclass(frozen=True)
    class Nothing(JobMethod):
        pass

    with pytest.raises(NotImplementedError, match="Nothing"):
        host.train(0, 1, TrainSpec(method=Nothing()), theta)


def test_state_store_merges_legacy_bare_vectors():
    store = StateStore()
    store.merge({3: np.ones(2, dtype=np.float32), 4: {"h": np.zeros(1, dtype=np.float32)}})
    assert set(store[3]) == {"c"} and set(store[4]) == {"h"}
    assert store.peek(5, "c") is None and 5 not in store.vectors


def test_grouped_jobs_with_a_shared_set_read_their_own_labels():
    """With malicious sharers, every device but them reads their shares with flipped labels: a fast-path group must
    give each job exactly what it gives alone (the grouped path once read the true labels for everyone)."""
    x, y, theta = _tiny_data()
    x = np.concatenate([x] * 4)
    y = np.concatenate([y] * 4)
    parts = [np.arange(k * 5, k * 5 + 5) for k in range(4)]
    shared = SharedData((0, 1), ((1, 1, 0), (0, 1, 1)), seed=5, flipped=(1,))
    spec = TrainSpec(epochs=1, batch_size=2, lr=0.3, shared=shared)
    fast = DeviceHost(x, y, parts, (LogRegConfig(), (D,), C, 1, True))
    alone = DeviceHost(x, y, parts, (LogRegConfig(), (D,), C, 1, False))
    devices, seeds = [0, 2, 3, 1], [11, 12, 13, 14]
    grouped, _ = fast.train_group(devices, seeds, spec, [theta] * 4)
    for k, (device, seed) in enumerate(zip(devices, seeds)):
        one, _ = alone.train(device, seed, spec, theta)
        np.testing.assert_allclose(grouped[k], one, rtol=0, atol=1e-6)
    # and the flipped labels really matter: device 2 reads a flipped share, device 1 (the malicious one) does not
    true_labels, _ = alone.train(2, 12, replace(spec, shared=replace(shared, flipped=())), theta)
    assert np.abs(grouped[1] - true_labels).max() > 1e-4


def test_a_label_flipping_device_trains_on_flipped_labels():
    """``label_flip`` trains on ``C − 1 − y`` (its job once read the true labels through the shared-set view)."""
    from hierfl.robust.behaviours import LabelFlip

    host, x, y, theta = _host([np.arange(5)])
    spec = TrainSpec(epochs=1, batch_size=2, lr=0.3)
    byz, _ = host.train(0, 1, replace(spec, attack=LabelFlip()), theta)
    honest, _ = host.train(0, 1, spec, theta)
    flipped, _ = host.trainer.train(theta, x, (C - 1 - y).astype(y.dtype), spec, 1, rows=np.arange(5))
    np.testing.assert_array_equal(byz, flipped)
    assert np.abs(byz - honest).max() > 1e-3
