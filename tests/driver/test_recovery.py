"""Checkpoints, ``hierfl resume`` and recovery from lost Ray actors (reliability, parts 1 and 2).

Every test compares against an uninterrupted run of the same scenario: metrics (wall-clock
fields and ``recovered`` lines aside), trace, clusters, devices, summary and the final model's bits.
"""

from __future__ import annotations

import copy

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierfl.cli import main
from hierfl.driver import RunError, resume_run, run_scenario
from hierfl.driver.checkpoint import CHECKPOINT_FILE, KILL_AFTER_ENV
from hierfl.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "checkpoint_resume.yaml"
WALL = ("wall_s", "startup_s")


def _metrics(run: Path) -> list[dict[str, Any]]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["event"] == "recovered":
            continue
        for key in WALL + (("executor", "workers") if rec["event"] == "run_start" else ()):
            rec.pop(key, None)
        out.append(rec)
    return out


def _summary(run: Path) -> dict[str, Any]:
    s = json.loads((run / "summary.json").read_text())
    for key in WALL + ("startup", "recoveries", "executor", "workers"):
        s.pop(key, None)
    return s


def assert_same_run(ref: Path, other: Path, same_config: bool = True) -> None:
    """``other`` has exactly ``ref``'s outputs (wall-clock fields and recovered lines aside)."""
    assert _metrics(other) == _metrics(ref)
    for name in ("trace.json", "clusters.jsonl", "devices.csv") + (("config.yaml",) if same_config else ()):
        assert (other / name).read_bytes() == (ref / name).read_bytes(), name
    assert _summary(other) == _summary(ref)
    assert np.array_equal(np.load(other / "final_model.npy"), np.load(ref / "final_model.npy"))
    assert not (other / CHECKPOINT_FILE).exists()  # a completed run keeps no checkpoint


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run (local executor)."""
    out = tmp_path_factory.mktemp("ref") / "run"
    res = run_scenario(load_scenario(str(SCENARIO)), out, source=str(SCENARIO))
    assert res.summary["status"] == "completed" and res.summary["rounds"] == 6
    # the scenario's numbers, so a run that silently learns nothing fails here
    assert res.summary["final_accuracy"] == pytest.approx(0.9273, abs=1e-4)
    return out


def _cli(args: list[str], kill_after: int | None) -> int:
    env = dict(os.environ)
    env.pop(KILL_AFTER_ENV, None)
    if kill_after is not None:
        env[KILL_AFTER_ENV] = str(kill_after)
    return subprocess.run([sys.executable, "-m", "hierfl.cli", *args], env=env, capture_output=True,
                          timeout=300).returncode


@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_resume_after_sigkill(reference: Path, tmp_path: Path) -> None:
    """The driver SIGKILLs itself right after its 3rd checkpoint; ``hierfl resume`` ends as the uninterrupted run."""
    out = tmp_path / "run"
    assert _cli(["run", str(SCENARIO), "--out", str(out), "-q"], kill_after=3) == -signal.SIGKILL
    assert (out / CHECKPOINT_FILE).is_file() and not (out / "summary.json").exists()
    assert main(["resume", str(out), "-q"]) == 0
    assert_same_run(reference, out)


def _stop_at(round_: int) -> Any:
    def progress(t: float, rounds: int, acc: float | None) -> None:
        if rounds >= round_:
            raise KeyboardInterrupt
    return progress


def assert_resumes_as_uninterrupted(tmp_path: Path, raw: dict, stop_round: int = 2) -> None:
    """``raw`` run whole, and again stopped by Ctrl-C at ``stop_round`` and resumed: the same files."""
    from hierfl.scenario.loader import validate_raw

    run_scenario(validate_raw(copy.deepcopy(raw)), tmp_path / "ref")
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_raw(copy.deepcopy(raw)), out, progress=_stop_at(stop_round))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(tmp_path / "ref", out)


def test_ctrl_c_twice_then_resume(reference: Path, tmp_path: Path) -> None:
    """Ctrl-C in round 2, resume, Ctrl-C again in round 4, resume to the end: the uninterrupted run's files."""
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(str(SCENARIO)), out, progress=_stop_at(2))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["resume"] == f"hierfl resume {out}"
    first_t = summary["checkpoint_t"]
    with pytest.raises(KeyboardInterrupt):
        resume_run(out, progress=_stop_at(4))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_t"] > first_t
    res = resume_run(out)
    assert res.summary["status"] == "completed"
    assert_same_run(reference, out)
    # a completed run has nothing to resume; a folder that is no run is named
    assert main(["resume", str(out)]) == 2
    assert main(["resume", str(tmp_path / "nowhere")]) == 2
    with pytest.raises(RunError, match="has completed"):
        resume_run(out)


def test_checkpoints_can_be_switched_off(tmp_path: Path) -> None:
    sc = load_scenario(str(SCENARIO), ["runtime.checkpoint.enabled=false"])

    def progress(t: float, rounds: int, acc: float | None) -> None:
        if rounds >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(sc, tmp_path / "run", progress=progress)
    assert not (tmp_path / "run" / CHECKPOINT_FILE).exists()
    with pytest.raises(RunError, match="no checkpoint.pkl"):
        resume_run(tmp_path / "run")


def test_a_checkpoint_of_an_earlier_format_is_refused_with_a_reason(tmp_path: Path, capsys: Any) -> None:
    """A checkpoint written before the protocols moved (format 1) names module paths that are gone: resuming it
    stops with a message and exit status 2, not an import error from the middle of the unpickling."""
    import pickle

    from hierfl.driver.checkpoint import FORMAT

    assert FORMAT == 2
    run = tmp_path / "old"
    run.mkdir()
    with open(run / CHECKPOINT_FILE, "wb") as fh:  # the header of format 1, then a class at its old module path
        pickle.dump({"hierfl_checkpoint": 1, "plugins": []}, fh)
        fh.write(b"chierfl.protocols.fedavg\nFedAvg\n.")  # pickle's GLOBAL opcode: importing it would fail
    with pytest.raises(RunError, match="not a checkpoint of this hierfl version"):
        resume_run(run)
    assert main(["resume", str(run)]) == 2
    assert "not a checkpoint of this hierfl version" in capsys.readouterr().err


FAULT_PLANS = {
    # (round, roles whose processes are killed): one rollback after losing a host and the leader at
    # once. The cloud role runs in the driver by default (hierfl.runtime.driver_cloud): it has no
    # process of its own to lose, and the driver's own death is the checkpoint/resume tests' case.
    "all_at_once": [(3, ("hosts", "leaders"))],
    # the same with the cloud as an actor (RayStart(cloud="actor"), a Ray client's default): all three kinds
    "all_at_once_cloud_actor": [(3, ("hosts", "cloud", "leaders"))],
    # a host first, then the cloud actor and the leader of the fresh executor: two rollbacks in one run
    "one_after_another": [(2, ("hosts",)), (4, ("cloud", "leaders"))],
}
CLOUD_ACTOR_PLANS = {"all_at_once_cloud_actor", "one_after_another"}


@pytest.mark.ray
@pytest.mark.parametrize("plan_name", [
    "all_at_once",
    "all_at_once_cloud_actor",
    pytest.param("one_after_another", marks=pytest.mark.skipif(
        not os.environ.get("HIERFL_FAULT_TESTS"), reason="a second rollback (~40 s): set HIERFL_FAULT_TESTS=1")),
])
def test_ray_recovers_lost_host_cloud_and_leader(reference: Path, tmp_path: Path, ray_session: Any,
                                                 monkeypatch: pytest.MonkeyPatch, plan_name: str) -> None:
    """Kill the processes of a DeviceHost, the Leader (and the Cloud, as an actor) mid-run: the outputs are
    the unfaulted run's."""
    from hierfl.runtime.driver_cloud import DriverCloud
    from hierfl.runtime.ray_executor import RayExecutor, RayStart

    ray = ray_session
    made: list[Any] = []  # every executor the run makes: the first, then one per recovery
    original = RayExecutor.__init__
    cloud_actor = plan_name in CLOUD_ACTOR_PLANS

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        assert isinstance(self.cloud, DriverCloud) != cloud_actor  # where the cloud role runs
        made.append(self)

    monkeypatch.setattr(RayExecutor, "__init__", init)
    if cloud_actor:
        original_start = RayStart.__init__

        def start(self: Any, kind: str = "ray", workers: Any = "auto", address: Any = None, cloud: str = "auto") -> None:
            original_start(self, kind, workers, address, cloud="actor")

        monkeypatch.setattr(RayStart, "__init__", start)
    plan = list(FAULT_PLANS[plan_name])
    expected = [len(roles) for _, roles in plan]
    killed: list[int] = []

    def progress(t: float, rounds: int, acc: float | None) -> None:
        # one kill per executor: the next one waits until the recovery has made a fresh executor
        if plan and rounds >= plan[0][0] and len(made) == len(killed) + 1:
            _, roles = plan.pop(0)
            ex = made[-1]
            actors = [ex.hosts[0] if r == "hosts" else getattr(ex, r) for r in roles]
            for pid in ray.get([a.pid.remote() for a in actors]):
                os.kill(pid, signal.SIGKILL)
            killed.append(len(roles))

    sc = load_scenario(str(SCENARIO), ["runtime.executor=ray", "runtime.workers=2"])
    res = run_scenario(sc, tmp_path / "run", progress=progress)
    assert killed == expected and len(made) == len(expected) + 1
    assert res.summary["recoveries"] == len(expected)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    recovered = [x for x in lines if x["event"] == "recovered"]
    assert [r["attempt"] for r in recovered] == list(range(1, len(expected) + 1))
    assert all("actor died" in r["error"] for r in recovered)
    assert all(r["t"] < r["lost_t"] for r in recovered)  # rolled back to an earlier checkpoint
    assert_same_run(reference, tmp_path / "run", same_config=False)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("HIERFL_FAULT_TESTS"),
                    reason="about 2 minutes on 2 cores: set HIERFL_FAULT_TESTS=1 to run it")
def test_cluster_survives_a_removed_worker_node(reference: Path, tmp_path: Path) -> None:
    """A 2-node ``ray.cluster_utils.Cluster``; the worker node (one DeviceHost) is removed after round 2."""
    import time

    from ray.cluster_utils import Cluster

    out = tmp_path / "run"
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        worker = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        proc = subprocess.Popen([sys.executable, "-m", "hierfl.cli", "run", str(SCENARIO), "--address",
                                 cluster.address, "--set", "runtime.executor=ray", "--set", "runtime.workers=2",
                                 "--out", str(out), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        removed = False
        deadline = time.monotonic() + 500
        while proc.poll() is None and time.monotonic() < deadline:
            metrics = out / "metrics.jsonl"
            if not removed and metrics.exists() and any(
                    '"event": "cloud_aggregate", "round": 2,' in line for line in metrics.read_text().splitlines()):
                cluster.remove_node(worker)
                removed = True
            time.sleep(0.2)
        _, err = proc.communicate(timeout=60)
        assert removed and proc.returncode == 0, err[-3000:]
    finally:
        cluster.shutdown()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["attempt"] for x in lines if x["event"] == "recovered"] == [1]
    assert_same_run(reference, out, same_config=False)


@pytest.mark.parametrize(("stem", "extra", "stop_at"), [
    ("lg_fedavg", [], 2),
    # after a warm-up of 2 rounds: devices that never trained start from the warm-up's model (the state base)
    ("lg_fedavg", ["training.trainer.warmup_rounds=2", "stop.rounds=5"], 4),
    ("fedmeta_sgd", [], 2),  # Meta-SGD with a local head, through edge servers
], ids=["lg_fedavg", "lg_fedavg-warmup", "fedmeta_sgd"])
@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_resume_keeps_personal_layers(tmp_path: Path, stem: str, extra: list[str], stop_at: int) -> None:
    """Device-held state of a personalised trainer (its devices' local layers, kept by their hosts) survives
    Ctrl-C and resume: the resumed run is the uninterrupted one, its device state included."""
    path = str(SCENARIO.parent / f"{stem}.yaml")
    overrides = ["stop.rounds=4", "stop.target_accuracy=null", "runtime.executor=local",
                 "runtime.checkpoint.every_cloud_aggregations=1", *extra]
    ref = tmp_path / "ref"
    run_scenario(load_scenario(path, overrides), ref)
    assert json.loads((ref / "summary.json").read_text())["device_state"]["devices"] > 0
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, overrides), out, progress=_stop_at(stop_at))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)


def test_resume_keeps_fedmd_parties_and_their_architectures(tmp_path: Path) -> None:
    """FedMD's state (each party's own model, of its own architecture, and the jobs in flight) survives
    Ctrl-C and resume: the resumed run is the uninterrupted one."""
    path = str(SCENARIO.parent / "fedmd_digits.yaml")
    overrides = ["stop.rounds=4", "stop.virtual_time_s=null", "runtime.checkpoint.every_cloud_aggregations=1"]
    ref = tmp_path / "ref"
    run_scenario(load_scenario(path, overrides), ref)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, overrides), out, progress=_stop_at(2))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)


def test_resume_keeps_rhfl_state_through_edge_servers(tmp_path: Path) -> None:
    """RHFL's state (each party's model and last two losses, the weights at the cloud and the edges, the sums
    and targets in flight through the edge servers) survives Ctrl-C and resume: the resumed run is the
    uninterrupted one."""
    path = str(SCENARIO.parent / "rhfl_hierarchy.yaml")
    overrides = ["stop.rounds=12", "stop.virtual_time_s=null", "runtime.checkpoint.every_cloud_aggregations=1",
                 "protocol.pretrain_epochs=2"]
    ref = tmp_path / "ref"
    run_scenario(load_scenario(path, overrides), ref)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, overrides), out, progress=_stop_at(7))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)
