"""Server jobs (hierfl/driver/server_jobs.py, hierfl/learn/server_tasks.py): a server's own computation
in virtual time — its length from the work the task counts and the server's FLOP/s, first in first
out per server, traced on the server's lane, its result handed to the protocol at its end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierfl.config.errors import ConfigError
from hierfl.core.rng import stream
from hierfl.driver import run_scenario
from hierfl.driver.server_jobs import ServerJobs
from hierfl.env.events import ServerJobDone
from hierfl.kernel.engine import EventQueue
from hierfl.learn.server_tasks import SERVER_TASKS, ServerContext, ServerResult, get_task, server_task
from hierfl.methods.fedavg.protocol import FedAvg
from hierfl.runtime.roles import Cloud
from hierfl.scenario.servers import ServersConfig
from tests.conftest import tiny
from tests.driver.server_roles import _cloud, _shipped_tasks


@server_task("test_halve")
def _halve(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
           rng: np.random.Generator) -> ServerResult:
    """Half of the first input; keeps a count of its calls at the point; charges ``params["flops"]``."""
    calls = ctx.state.get("calls", np.zeros(1, dtype=np.float64)) + 1
    ctx.state["calls"] = calls
    return ServerResult([inputs[0] * np.float32(0.5)], float(params["flops"]),
                        {"calls": float(calls[0]), "draw": float(rng.random())})


# -- the queue: lengths, FIFO per server, seeds, counters, trace ----------------------------------------

class _Servers:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def run_task(self, name: str, params: dict[str, Any], seed: int, tier: str, entity: int,
                 inputs: list[Any]) -> tuple[list[Any], float, dict[str, float], int]:
        self.calls.append((name, seed, tier, entity))
        return [sum(inputs)], float(params["flops"]), {"x": 1.0}, 8 * len(self.calls)


class _Executor:
    def __init__(self) -> None:
        self.servers = _Servers()


class _Telemetry:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.spans: list[tuple[Any, ...]] = []

    def count(self, name: str, by: float = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by

    def span(self, lane: Any, name: str, start: float, duration: float, **args: Any) -> None:
        self.spans.append((lane, name, start, duration, args["queued_s"]))


class _Clock:
    def __init__(self) -> None:
        self.queue = EventQueue()

    @property
    def now(self) -> float:
        return self.queue.now

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        return stream(5, name, *ids)

    def at(self, time: float, kind: str, payload: Any = None) -> Any:
        return self.queue.push(time, kind, payload)


def test_jobs_take_flops_over_the_servers_rate_one_after_another_per_server():
    servers = ServersConfig.model_validate({"cloud": {"gflops": 2.0}, "edge": {"tier": "edge_cpu"}})
    clock, tel, ex = _Clock(), _Telemetry(), _Executor()
    jobs = ServerJobs(servers, ex, tel, clock)
    a = jobs.run("cloud", 0, ("cloud", 0), "t", [1.0], "done", payload="a", params={"flops": 6e9})   # 3 s
    b = jobs.run("cloud", 0, ("cloud", 0), "t", [2.0], "done", payload="b", params={"flops": 1e9})   # 0.5 s, queued
    c = jobs.run("edge", 1, ("edge", 1), "t", [3.0], "done", payload="c", params={"flops": 400e9})   # 1 s at 400 GFLOP/s
    assert (a.time, b.time, c.time) == (3.0, 3.5, 1.0)
    assert isinstance(b.payload, ServerJobDone)
    assert (b.payload.start, b.payload.end, b.payload.payload, b.payload.outputs) == (3.0, 3.5, "b", (2.0,))
    assert tel.spans == [(("cloud", 0), "server_job:t", 0.0, 3.0, 0.0), (("cloud", 0), "server_job:t", 3.0, 0.5, 3.0),
                         (("edge", 1), "server_job:t", 0.0, 1.0, 0.0)]
    assert tel.counts == {"server_jobs": 3, "server_job_s": 4.5, "server_flops": 407e9}
    # every task of a point draws its own seed: (seed, "server_job", tier, entity, k)
    seeds = [s for _, s, _, _ in ex.servers.calls]
    assert seeds[0] == int(stream(5, "server_job", 0, 0, 0).integers(2 ** 62))
    assert seeds[1] == int(stream(5, "server_job", 0, 0, 1).integers(2 ** 62))
    assert seeds[2] == int(stream(5, "server_job", 1, 1, 0).integers(2 ** 62))
    # a server idle again starts the next job at once
    while clock.queue.pop_next() is not None:
        pass
    d = jobs.run("cloud", 0, ("cloud", 0), "t", [1.0], "done", params={"flops": 2e9})
    assert d.time == pytest.approx(4.5)
    part = jobs.summary_part()
    assert part == {"server_jobs": {"tasks": {"cloud": 3, "edge": 1}, "busy_s": {"cloud": 4.5, "edge": 1.0},
                                    "state_bytes": {"cloud": 32, "edge": 24}}}


def test_no_jobs_no_summary_block():
    assert ServerJobs(ServersConfig(), _Executor(), _Telemetry(), _Clock()).summary_part() is None


# -- the servers' section -------------------------------------------------------------------------------

def test_servers_defaults_and_rates():
    cfg = ServersConfig()
    assert cfg.flops_per_s("cloud") == 3500e9   # cloud_gpu (design default, placeholder figure)
    assert cfg.flops_per_s("edge") == 400e9     # edge_cpu
    assert ServersConfig.model_validate({"cloud": {"tier": "cloud_cpu"}}).flops_per_s("cloud") == 400e9
    assert ServersConfig.model_validate({"edge": {"tier": "edge_gpu", "gflops": 12.5}}).flops_per_s("edge") == 12.5e9


def test_an_unknown_server_tier_names_the_key_and_the_tiers():
    with pytest.raises(ConfigError) as info:
        tiny(servers={"cloud": {"tier": "cray"}})
    problems = [p for p in info.value.problems if p.path.startswith("servers.cloud.tier")]
    assert problems, info.value.report()
    assert "cloud_gpu" in problems[0].message and "edge_cpu" in problems[0].message
    with pytest.raises(ConfigError) as info:
        tiny(servers={"edge": {"gflops": 0}})
    assert any(p.path.startswith("servers.edge.gflops") for p in info.value.problems)


# -- the role: tasks, what a point keeps, checkpoints ---------------------------------------------------

def test_public_finetune_is_sgd_on_the_public_split_charged_three_forward_passes():
    from hierfl.core.work import TrainSpec
    from hierfl.learn.local import LocalTrainer

    cloud, params, (x, y) = _cloud()
    out, flops, stats, kept = cloud.run_task("public_finetune", {"epochs": 2, "lr": 0.1, "batch_size": 8}, 123,
                                             "cloud", 0, [0], [None], params)
    trainer = LocalTrainer(cloud.work._models[0], (4,), 2, torch_threads=1)
    seed = int(np.random.default_rng(123).integers(2 ** 62))
    want, _ = trainer.train(params, x, y, TrainSpec(epochs=2, batch_size=8, lr=0.1), seed)
    np.testing.assert_array_equal(out[0], want)
    # logreg 4 → 2: 8 multiply-adds = 16 forward FLOPs per sample; 2 epochs over 30 samples, 3 passes each
    assert flops == 3 * 16 * 60
    assert stats["samples"] == 60 and kept == 0


def test_public_finetune_without_public_data_is_a_clear_error():
    cloud, params, _ = _cloud(public=False)
    with pytest.raises(ValueError, match="data.public"):
        cloud.run_task("public_finetune", {}, 1, "cloud", 0, [0], [None], params)


def test_a_point_keeps_its_state_across_tasks_and_in_checkpoints():
    cloud, params, _ = _cloud()
    for k in range(3):
        _, _, stats, kept = cloud.run_task("test_halve", {"flops": 1.0}, k, "edge", 2, [0], [None], params)
    assert stats["calls"] == 3 and kept == 8
    _, _, stats, _ = cloud.run_task("test_halve", {"flops": 1.0}, 0, "edge", 1, [0], [None], params)
    assert stats["calls"] == 1  # another point keeps its own
    saved = cloud.export_state()
    cloud.run_task("test_halve", {"flops": 1.0}, 0, "edge", 2, [0], [None], params)
    cloud.import_state(saved)
    _, _, stats, _ = cloud.run_task("test_halve", {"flops": 1.0}, 0, "edge", 2, [0], [None], params)
    assert stats["calls"] == 4  # the checkpoint's count, not the one run after it
    # the same seed draws the same numbers
    a = cloud.run_task("test_halve", {"flops": 1.0}, 9, "cloud", 0, [0], [None], params)[2]["draw"]
    b = cloud.run_task("test_halve", {"flops": 1.0}, 9, "cloud", 0, [0], [None], params)[2]["draw"]
    assert a == b


def test_unknown_task_lists_the_registered_ones():
    with pytest.raises(ValueError) as info:
        get_task("no_such_task")
    assert "public_finetune" in str(info.value) and "test_halve" in str(info.value)


def test_a_task_must_charge_finite_nonnegative_work():
    with pytest.raises(ValueError, match="flops"):
        ServerResult([], -1.0)
    with pytest.raises(ValueError, match="flops"):
        ServerResult([], float("nan"))


# -- a whole run: the protocol hears the job's end, and the time adds up ----------------------------------

def _fedavg_with_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """FedAvg whose cloud halves every aggregate in a server job (7 GFLOP at 1 GFLOP/s: 7 s) before the next round."""
    close = FedAvg._close

    def _close(self: FedAvg, arrived: list[int]) -> None:
        env = self.env
        env.set_global(env.tier("cloud").commit(sorted(arrived), base=self.round_model))
        self.round += 1
        env.tier("cloud").run("test_halve", [env.global_model], "halved", payload=self.round,
                              params={"flops": 7e9})

    def on_halved(self: FedAvg, event: Any) -> None:
        assert event.payload.payload == self.round and event.time == event.payload.end
        self.env.set_global(event.payload.outputs[0])
        if not self.env.stopping:
            self._begin_round()

    assert close is not None
    monkeypatch.setattr(FedAvg, "_close", _close)
    monkeypatch.setattr(FedAvg, "on_halved", on_halved, raising=False)


def test_a_run_waits_for_its_server_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    base = run_scenario(tiny(stop={"rounds": 3}), tmp_path / "base").summary
    _fedavg_with_jobs(monkeypatch)
    sc = tiny(stop={"rounds": 3}, servers={"cloud": {"gflops": 1.0}})
    run = run_scenario(sc, tmp_path / "jobs")
    s = run.summary
    # three equal rounds (every device, fixed speeds); the run ends at the third aggregation, so two jobs
    # of 7 s lie between rounds
    assert s["virtual_time_s"] == pytest.approx(base["virtual_time_s"] + 2 * 7.0, abs=1e-9)
    assert s["totals"]["server_jobs"] == 3 and s["totals"]["server_job_s"] == pytest.approx(21.0)
    assert s["server_jobs"] == {"tasks": {"cloud": 3}, "busy_s": {"cloud": 21.0}, "state_bytes": {"cloud": 8}}
    trace = json.loads((tmp_path / "jobs" / "trace.json").read_text())
    spans = [e for e in trace if e.get("name") == "server_job:test_halve"]
    assert len(spans) == 3 and all(e["dur"] == pytest.approx(7e6) for e in spans)  # microseconds
    # same scenario, same bits
    again = run_scenario(sc, tmp_path / "again").summary
    assert again["final_accuracy"] == s["final_accuracy"] and again["final_loss"] == s["final_loss"]


def test_server_tasks_registry_names_are_unique():
    with pytest.raises(ValueError, match="twice"):
        server_task("test_halve")(lambda ctx, inputs, params, rng: ServerResult([], 0.0))
    assert SERVER_TASKS["test_halve"] is _halve


# -- conformance: every shipped task runs on its example, deterministically, charging finite work ----------

def test_shipped_tasks_live_in_their_method_package_or_the_shared_tasks():
    # a method's tasks are its package's server.py; hierfl.learn.tasks holds those no one method owns; a
    # cross-cutting feature's task is its package's server.py (the transfer channels' encode → decode, privacy's
    # local noise on one upload)
    homes = {name: SERVER_TASKS[name].__module__ for name in _shipped_tasks()}
    stray = {name: mod for name, mod in homes.items()
             if not (mod.startswith("hierfl.learn.tasks.") or re.fullmatch(r"hierfl\.methods\.\w+\.server", mod)
                     or mod in ("hierfl.channels.server", "hierfl.privacy.server"))}
    assert not stray, stray
    assert any(mod.startswith("hierfl.methods.") for mod in homes.values())


def test_a_fresh_process_finds_a_method_packages_task_on_first_look_up():
    # a Ray worker (or the process of a cloud role) imports nothing of the methods before its first task:
    # looking one up registers every shipped task there
    code = ("import sys\nfrom hierfl.learn.server_tasks import get_task\n"
            "print(get_task('pfnm_match').__module__, get_task('public_finetune').__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["hierfl.methods.matched.server", "hierfl.learn.tasks.public_finetune"]


@pytest.mark.parametrize("name", _shipped_tasks())
def test_every_shipped_task_conforms(name: str):
    from hierfl.learn.server_tasks import EXAMPLES

    assert name in EXAMPLES, f"server task {name!r}: register it with an example (server_task(name, example=...))"
    results = []
    for _ in range(2):
        cloud, params, _ = _cloud()
        ctx = ServerContext("cloud", 0, (4,), 2, cloud.work.public, {}, cloud.work.trainer_of, cloud.work.forward_flops)
        inputs, task_params = EXAMPLES[name](ctx)
        n = len(inputs)
        results.append(cloud.run_task(name, task_params, 77, "cloud", 0, list(range(n)), [None] * n, *inputs))
    (out_a, flops_a, stats_a, kept_a), (out_b, flops_b, stats_b, kept_b) = results
    assert np.isfinite(flops_a) and flops_a >= 0 and flops_a == flops_b
    assert all(o.dtype == np.float32 and o.ndim == 1 for o in out_a)
    assert len(out_a) == len(out_b) and all(np.array_equal(a, b) for a, b in zip(out_a, out_b))
    assert stats_a == stats_b and kept_a == kept_b


def test_ray_runs_server_jobs_to_the_local_bits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ray_session):
    """The cloud role runs the task under either executor (under Ray, in the driver's process: the cloud's
    default place), so the results, times and outputs agree bit for bit."""
    _fedavg_with_jobs(monkeypatch)
    local = run_scenario(tiny(stop={"rounds": 3}, servers={"cloud": {"gflops": 1.0}}), tmp_path / "local").summary
    ray = run_scenario(tiny(stop={"rounds": 3}, servers={"cloud": {"gflops": 1.0}}, runtime={"executor": "ray"}),
                       tmp_path / "ray").summary
    for key in ("final_accuracy", "final_loss", "virtual_time_s", "totals", "server_jobs"):
        assert ray[key] == local[key], key
    assert (tmp_path / "ray" / "metrics.jsonl").read_text().count("\n") == \
        (tmp_path / "local" / "metrics.jsonl").read_text().count("\n")
