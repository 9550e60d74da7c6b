"""Server tasks compute on the run's device (``ServerContext.device``) and give the CPU run's bits there.

As in ``test_device_jobs.py``, no GPU is needed: the cloud's device forced to ``cpu:0`` makes FedFTG's
generator, pFedLA's hypernetworks and the cloud's trainers take every branch a GPU takes (modules moved,
draws made on the CPU and then moved, losses summed where they are, vectors crossing in stacks), with CPU
kernels, so every contract output must be the plain run's, byte for byte. Each run is a shipped scenario
at small limits; a spy on the task registry records the device every task was handed and the cloud's
transfer counter shows the crossings were counted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hierfl.driver import run_scenario
from hierfl.learn import server_tasks
from hierfl.learn.server_tasks import ServerContext, ServerResult
from hierfl.learn.staging import Transfers
from hierfl.runtime.server_roles import ServerWork
from hierfl.scenario.loader import load_scenario
from tests.golden import contract_outputs

OFF_CPU = "cpu:0"
"""A device string that is not ``cpu``: the tasks take their GPU branches, on CPU kernels."""

ROOT = Path(__file__).resolve().parents[2] / "scenarios"
LOCAL = ["runtime.executor=local", "stop.target_accuracy=null", "evaluation.every_s=null"]
RUNS = {
    # one round of 5 teachers, a one-iteration generator of 8 samples: the generator's first job builds it
    # from its seed's draws, the second reads it back from the cloud's state
    "fedftg": ("fedftg", ["stop.rounds=2", "stop.virtual_time_s=null", "protocol.iters=1", "protocol.batch_size=8",
                          "training.epochs=1"]),
    # every upload one hypernetwork step; 6 devices and a small hypernetwork
    "pfedla": ("pfedla", ["stop.virtual_time_s=1.5", "devices.count=6", "protocol.embed_dim=8",
                          "protocol.hidden_dim=8", "training.epochs=1"]),
    # the one-shot matching on the host (no torch modules of its own), its devices' jobs on the run's device
    "pfnm": ("pfnm", ["devices.count=4", "training.epochs=2", "protocol.iters=1"]),
}


def _run(stem: str, sets: list[str], out: Path) -> None:
    run_scenario(load_scenario(ROOT / f"{stem}.yaml", [*LOCAL, *sets]), out)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_server_tasks_on_the_run_device_give_the_cpu_bits(name: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every contract output and the final model of a run whose cloud computes on a device other than
    ``cpu`` equal the plain run's; every task was handed that device; the cloud counted its crossings."""
    stem, sets = RUNS[name]
    seen: list[str] = []
    works: list[ServerWork] = []
    real_get, real_init = server_tasks.get_task, ServerWork.__init__

    def spy_get(task: str):  # type: ignore[no-untyped-def]
        fn = real_get(task)

        def run(ctx: ServerContext, inputs: list[np.ndarray], params: dict, rng: np.random.Generator) -> ServerResult:
            seen.append(ctx.device)
            return fn(ctx, inputs, params, rng)

        return run

    def spy_init(self: ServerWork, *a: object) -> None:
        real_init(self, *a)  # type: ignore[arg-type]
        works.append(self)

    monkeypatch.setattr(server_tasks, "get_task", spy_get)
    monkeypatch.setattr(ServerWork, "__init__", spy_init)
    _run(stem, sets, tmp_path / "cpu")
    assert seen and set(seen) == {"cpu"}
    plain = works[-1].transfers.as_dict()
    seen.clear()
    monkeypatch.setattr("hierfl.runtime.device_host.resolve_device", lambda d: OFF_CPU)
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: OFF_CPU)
    _run(stem, sets, tmp_path / "dev")
    assert seen and set(seen) == {OFF_CPU}
    counted = works[-1].transfers.as_dict()
    if name == "pfnm":  # host numpy and scipy only: nothing crosses
        assert counted == plain == Transfers().as_dict()
    else:  # every task moves its models up once and its results down once, on any device
        assert counted == plain and counted["h2d_calls"] >= len(seen) and counted["d2h_calls"] >= len(seen)
    a, b = contract_outputs(tmp_path / "cpu"), contract_outputs(tmp_path / "dev")
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key], key
    assert np.array_equal(np.load(tmp_path / "cpu" / "final_model.npy"), np.load(tmp_path / "dev" / "final_model.npy"))


def test_fedftg_job_crossings_and_device_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """One fine-tuning job with a kept generator and Adam moments: the student and its K teachers go up in one
    copy, the kept generator and its two moments up once each; the result, the generator and the moments come
    down once each; the losses are read once; the bits are the CPU job's; the generator, the student and every
    teacher are moved to the device."""
    import torch

    from hierfl.learn import local as local_module
    from hierfl.methods.fedftg.trainer import FTGSettings, finetune
    from hierfl.models import LogRegConfig

    cfg, shape = LogRegConfig(), (1, 4, 4)
    rng = np.random.default_rng(3)
    teachers = [rng.standard_normal(34).astype(np.float32) for _ in range(3)]
    counts = np.array([[4, 1], [1, 4], [2, 2]])
    settings = FTGSettings(iters=2, batch_size=4, noise_dim=3, gen_width=2, persist_gen_optimizer=True)
    state: dict[str, np.ndarray] = {}
    finetune(cfg, shape, 2, teachers[0], teachers, counts, settings, state, np.random.default_rng(0))
    assert {"gen_params", "gen_adam_m"} <= state.keys()
    reads = {"download": 0}
    download = local_module.download

    def counted(t: torch.Tensor) -> np.ndarray:
        reads["download"] += 1
        return download(t)

    monkeypatch.setattr(local_module, "download", counted)
    t = Transfers()
    want, want_stats = finetune(cfg, shape, 2, teachers[0], teachers, counts, settings, dict(state),
                                np.random.default_rng(1))
    reads["download"] = 0
    got, stats = finetune(cfg, shape, 2, teachers[0], teachers, counts, settings, dict(state),
                          np.random.default_rng(1), device=OFF_CPU, transfers=t)
    assert np.array_equal(got, want) and stats == want_stats
    # 3 teachers + the student up in one call; generator, m and v up; generator, m, v and the result down
    assert t.as_dict() == {"h2d_calls": 3, "h2d_models": 7, "d2h_calls": 3, "d2h_models": 4}
    assert reads["download"] == 6  # generator params and buffers, m, v, the four loss sums at once, the result
    built: list[str] = []
    real_to = torch.nn.Module.to

    def spy_to(self: torch.nn.Module, *a: object, **kw: object) -> torch.nn.Module:
        built.append(str(a[0] if a else kw.get("device")))
        return real_to(self, *a, **kw)

    monkeypatch.setattr(torch.nn.Module, "to", spy_to)
    finetune(cfg, shape, 2, teachers[0], teachers, counts, settings, dict(state), np.random.default_rng(1),
             device=OFF_CPU)
    assert built.count(OFF_CPU) == 1 + 1 + len(teachers)  # the generator, the student, every teacher


def test_pfedla_hypernetwork_steps_on_the_device_with_one_crossing_each_way() -> None:
    """A client's update off the CPU: its hypernetwork goes up once and comes down once, the personalised model
    and the stored hypernetwork are the CPU update's bits."""
    from hierfl.methods.pfedla.trainer import client_update

    layout = [("w", (2, 3)), ("b", (2,))]
    params = {"client": 1, "clients": 3, "seeds": [1, 2, 3], "hn_lr": 0.5, "embed_dim": 3, "hidden_dim": 4,
              "k_keep": 0, "vjp_sign": "old_minus_new", "granularity": "layer"}
    rng = np.random.default_rng(4)
    sent, trained = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    cpu: dict[str, np.ndarray] = {}
    dev: dict[str, np.ndarray] = {}
    t = Transfers()
    want, _, want_stats = client_update(cpu, trained, sent, layout, params)
    got, _, stats = client_update(dev, trained, sent, layout, params, device=OFF_CPU, transfers=t)
    assert np.array_equal(got, want) and stats == want_stats
    assert np.array_equal(dev["hypernets"], cpu["hypernets"]) and not np.array_equal(dev["hypernets"][1],
                                                                                     dev["hypernets"][0])
    assert t.as_dict() == {"h2d_calls": 1, "h2d_models": 1, "d2h_calls": 1, "d2h_models": 1}


def test_context_upload_and_download_count_and_copy() -> None:
    """``ctx.upload`` stacks host vectors into one new tensor on the device (never a view of an input: a task
    may train it in place), ``ctx.download`` copies back; each is one counted crossing."""
    ctx = ServerContext("cloud", 0, (4,), 2, None, {}, lambda k: None, lambda k: 0.0, OFF_CPU)  # type: ignore[arg-type,return-value]
    a, b = np.arange(3, dtype=np.float32), np.ones(3, dtype=np.float64)
    up = ctx.upload([a, b])
    up[0, 0] = 7.0
    assert a[0] == 0.0 and up.shape == (2, 3) and str(up.dtype) == "torch.float32"
    back = ctx.download(up[1])
    assert np.array_equal(back, [1.0, 1.0, 1.0]) and back.dtype == np.float32
    assert ctx.download(up).shape == (2, 3)
    assert ctx.transfers.as_dict() == {"h2d_calls": 1, "h2d_models": 2, "d2h_calls": 2, "d2h_models": 3}


def test_every_shipped_task_gives_its_cpu_bits_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each shipped task's conformance example, run by a cloud whose device resolves to ``cpu:0``: the task is
    handed that device, and its outputs, FLOPs, stats and kept bytes are the plain cloud's."""
    from tests.driver.server_roles import _cloud, _shipped_tasks

    def run_all() -> dict[str, tuple]:
        out = {}
        for name in _shipped_tasks():
            cloud, _, _ = _cloud()
            ctx = ServerContext("cloud", 0, (4,), 2, cloud.work.public, {}, cloud.work.trainer_of,
                                cloud.work.forward_flops)
            inputs, params = server_tasks.EXAMPLES[name](ctx)
            n = len(inputs)
            out[name] = (cloud.work.device, *cloud.run_task(name, params, 77, "cloud", 0, list(range(n)), [None] * n,
                                                             *inputs))
        return out

    plain = run_all()
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: OFF_CPU)
    forced = run_all()
    assert plain.keys() == forced.keys() and {"fedftg", "pfedla", "pfnm_match"} <= plain.keys()
    for name, (dev_a, out_a, flops_a, stats_a, kept_a) in plain.items():
        dev_b, out_b, flops_b, stats_b, kept_b = forced[name]
        assert (dev_a, dev_b) == ("cpu", OFF_CPU), name
        assert len(out_a) == len(out_b) and all(np.array_equal(a, b) for a, b in zip(out_a, out_b)), name
        assert (flops_a, stats_a, kept_a) == (flops_b, stats_b, kept_b), name


def test_the_ray_clouds_tasks_resolve_to_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray executor hands the cloud its spec through ``on_cpu`` (the cloud reserves no GPU share): whatever
    ``runtime.device`` says, its tasks and evaluators get ``cpu``; the local executor's cloud resolves the run's
    device (here ``cuda`` resolved as a GPU machine would) once, for every task."""
    from hierfl.models import LogRegConfig
    from hierfl.runtime.role_common import on_cpu

    spec = (LogRegConfig(), (4,), 2, 1, False, "cuda", "fp32", "auto")
    assert ServerWork(on_cpu(spec), None).device == "cpu"
    calls: list[str] = []
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: calls.append(d) or OFF_CPU)
    work = ServerWork(spec, None)
    assert work.device == OFF_CPU and work.trainer_of(0).device == OFF_CPU and work.device == OFF_CPU
    assert calls == ["cuda"] and work.trainer_of(0).transfers is work.transfers
