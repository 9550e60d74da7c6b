"""The GPU figures in one command: batched-trainer speed against the plain vmap floor, the CIFAR-10 recipe
end to end at bf16 and fp32, batched against job by job, and host↔device copies per round.

Run it on a GPU node as ``bash analysis/bench/gpu_check.sh`` (which installs the few pure-Python and numpy
dependencies from ``analysis/bench/wheels/`` when they are missing, then runs this file), or directly::

    python analysis/bench/gpu_check.py [--budget 200] [--no-tests] [--out DIR]
    python analysis/bench/gpu_check.py --smoke          # the same code on the CPU, tiny sizes, seconds

Sections (each bounded in time: sections 1-4 within ``--budget`` seconds, the tests within
:data:`TESTS_TIMEOUT_S`, about five minutes in all with start-up):

1. **micro** — client-steps/s of hierfl's batched trainer (:class:`hierfl.learn.vmapped.VmapTrainer`,
   ``train_group``: staging, data gather, per-job dropout masks, the SGD step, the results back on the host)
   against the *vmap floor*: the same arithmetic written plainly (``torch.func.functional_call`` +
   ``grad`` + ``vmap`` over ``K`` stacked parameter sets, data already on the device, ``w ← w − lr·g``), at
   ``K = 50`` clients, 5 steps of batch 10, the pfl-research CNN (``pfl_cnn``), fp32 and bf16 side by side,
   and their ratio (goal ≥ 0.8). Both use the backend settings of a hierfl run on a GPU (no TF32,
   deterministic cuDNN), so the ratio is hierfl's overhead, not a different kernel choice.
2. **e2e** — pfl-research's CIFAR-10 recipe (``scenarios/gpu_pfl_cifar10.yaml``: ``pfl_cnn``,
   CIFAR-shaped synthetic data) on the local executor, batched on the device: bf16 for as many of the
   1,500 rounds as fit its share of the budget, fp32 for 300 rounds (or what fits), each with measured
   seconds and the extrapolation to 1,500 rounds (goals: bf16 ≤ 120 s, fp32 ≤ 180 s). A short calibration
   run measures seconds per round and start-up first; the extrapolation adds the measured run's own
   seconds per round (aggregation to aggregation, evaluations included) for the rounds it did not run.
3. **compare** — the first 50 rounds batched and job by job (``runtime.fast_path`` true and false, the same
   seed, fp32, the same device): the largest difference of the final models and of the final accuracy,
   against stated tolerances (float reassociation only; it grows with rounds, so it is a check, not a bit test).
4. **transfers** — model-sized host↔device copies per round of the batched trainer, read from every
   trainer object of the run that keeps a ``transfers`` counter (:data:`COUNTERS`); ``null`` when this tree
   has none.
5. **tests** — the CUDA tests of the repository (:data:`CUDA_TESTS`, ``-k cuda``; skipped without CUDA
   elsewhere), when pytest imports: their outcome line and exit status (``--no-tests`` leaves them out).

Results: printed, and written to ``$OUT/gpu_check.json`` and ``$OUT/gpu_check.md`` when ``--out`` or
the ``OUT`` environment variable names a folder. ``--smoke`` runs every section on the CPU with tiny
sizes (an 8x8 input, 8 devices, a few rounds; CNN groups through vmap as on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RECIPE = ROOT / "scenarios" / "gpu_pfl_cifar10.yaml"
"""pfl-research's CIFAR-10 recipe with its CNN (``pfl_cnn``)."""

FULL_ROUNDS = 1500
"""The recipe's rounds, the target of every extrapolation."""

GOALS = {"ratio": 0.8, "bf16_s": 120.0, "fp32_s": 180.0}
"""The goals printed next to the figures: batched/floor ratio, seconds for 1,500 rounds at bf16 and fp32."""

TOLERANCE = {"max_abs_param": 1e-2, "accuracy": 0.02}
"""Stated tolerances of batched against job by job after the compared rounds (fp32): the largest absolute
difference of a final parameter, and of the final accuracy."""

CUDA_TESTS = ["tests/learn/test_device_jobs.py", "tests/learn/test_batched_learning.py", "tests/learn/test_precision.py"]
"""Test files whose ``cuda`` tests run at the end of a full check (at most :data:`TESTS_TIMEOUT_S` seconds)."""

TESTS_TIMEOUT_S = 90

COUNTERS: list[tuple[str, str]] = [("hierfl.runtime.device_host:DeviceHost", "staging.transfers"),
                                   ("hierfl.learn.local:LocalTrainer", "transfers")]
"""Where host↔device copy counters live: ``(module:class, dotted attribute)``; every instance made during a
run is kept, and the counter (a ``dict``, or an object with ``as_dict()``, such as the staging code's
:class:`hierfl.learn.staging.Transfers`, which every group trainer of a host shares) is summed (``*_calls``,
``*_models`` keys). A counter added elsewhere is read by adding its class here."""


@dataclass(frozen=True)
class Sizes:
    """What the sections run: full on a GPU, tiny with ``--smoke``."""

    device: str
    clients: int = 50          # K of the micro benchmark
    steps: int = 5             # local steps per client (micro)
    batch: int = 10
    shape: tuple[int, ...] = (3, 32, 32)
    hidden: int = 128          # pfl_cnn's hidden units
    repeat: int = 3
    calib_rounds: int = 10     # the calibration run before each e2e section
    bf16_rounds: int = FULL_ROUNDS  # at most (as many as fit its share of the budget)
    fp32_rounds: int = 300
    compare_rounds: int = 50
    budget: float = 200.0      # seconds for sections 1-4 (interpreter start-up, wheels and tests excluded)
    overrides: tuple[str, ...] = ()  # further --set items of every recipe run

    @staticmethod
    def smoke() -> Sizes:
        # 8 devices x 10 samples of 3x8x8, 40 test samples, 2 jobs a round; CNN groups through vmap on the CPU
        return Sizes(device="cpu", clients=3, steps=2, batch=4, shape=(3, 8, 8), hidden=8, repeat=1, calib_rounds=1,
                     bf16_rounds=2, fp32_rounds=2, compare_rounds=2, budget=60.0,
                     overrides=("devices.count=8", "data.dataset.num_samples=80", "data.dataset.test_samples=40",
                                "data.dataset.shape=[3,8,8]", "runtime.cpu_batching=vmap", "protocol.fraction=0.25",
                                "evaluation.every_s=null"))


# -- 1. micro: hierfl's batched trainer against the plain vmap floor ---------------------------------------


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], repeat: int, device: str) -> float:
    """Median wall seconds of ``fn`` over ``repeat`` calls after one warm-up call (device synchronised)."""
    fn()
    _sync(device)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def vmap_floor(module: Any, p0: dict[str, Any], x: Any, y: Any, lr: float, precision: str,
               device: str) -> Callable[[], Any]:
    """The floor: ``K`` clients' plain SGD with ``torch.func`` and nothing else — ``x``: ``(K, S, B, F)``
    and ``y``: ``(K, S, B)`` already on the device, every step one ``vmap(grad(loss))`` over the stacked
    parameters and ``w ← w − lr·g``; dropout draws from torch's own generator (``randomness="different"``).
    Returns the function that trains the ``K`` clients from ``p0`` once and gives the ``(K, P)`` result."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap

    from hierfl.learn.precision import autocast

    k_jobs, steps = int(x.shape[0]), int(x.shape[1])

    def loss(params: dict[str, Any], xb: Any, yb: Any) -> Any:
        with autocast(precision, device):
            logits = functional_call(module, params, (xb,))
        return F.cross_entropy(logits.float(), yb)

    step = vmap(grad(loss), in_dims=(0, 0, 0), randomness="different")

    def run() -> Any:
        params = {n: v.unsqueeze(0).expand(k_jobs, *v.shape).clone() for n, v in p0.items()}
        for s in range(steps):
            g = step(params, x[:, s], y[:, s])
            params = {n: params[n] - lr * g[n] for n in params}
        return torch.cat([params[n].reshape(k_jobs, -1) for n in p0], dim=1)

    return run


def micro(sizes: Sizes, precision: str) -> dict[str, Any]:
    """Client-steps/s of :class:`~hierfl.learn.vmapped.VmapTrainer` and of :func:`vmap_floor` at ``precision``."""
    import torch

    from hierfl.core.work import TrainSpec
    from hierfl.learn.local import LocalTrainer, init_params
    from hierfl.learn.vmapped import VmapTrainer
    from hierfl.models import PflCNNConfig

    k, s, b, dev = sizes.clients, sizes.steps, sizes.batch, sizes.device
    cfg = PflCNNConfig(hidden=sizes.hidden)
    n = s * b
    features = int(np.prod(sizes.shape))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(k * n, features)).astype(np.float32)
    y = rng.integers(0, 10, k * n)
    rows = [np.arange(j * n, (j + 1) * n) for j in range(k)]
    p0 = init_params(cfg, sizes.shape, 10, 0)
    spec = TrainSpec(epochs=1, batch_size=b, lr=0.05)
    trainer = LocalTrainer(cfg, sizes.shape, 10, precision=precision, device=dev)
    vt = VmapTrainer(trainer, dev)
    out = np.empty((k, trainer.num_params), dtype=np.float32)
    seeds = list(range(100, 100 + k))
    hierfl_s = _timed(lambda: vt.train_group([p0] * k, x, y, rows, spec, seeds, out), sizes.repeat, dev)

    module = cfg.build(sizes.shape, 10).to(dev).train()
    start = {name: t.detach().clone() for name, t in module.named_parameters()}
    # each client's samples in its batch order (the floor's data are laid out once, on the device)
    xs = torch.from_numpy(x.reshape(k, s, b, features)).to(dev)
    ys = torch.from_numpy(y.reshape(k, s, b)).to(dev)
    floor_s = _timed(vmap_floor(module, start, xs, ys, spec.lr, precision, dev), sizes.repeat, dev)
    steps = k * s
    return {"precision": precision, "K": k, "S": s, "B": b, "params": trainer.num_params,
            "hierfl_steps_per_s": steps / hierfl_s, "floor_steps_per_s": steps / floor_s,
            "ratio": floor_s / hierfl_s}


# -- 2-4. the recipe end to end ------------------------------------------------------------------------------


class Instances:
    """Keeps every instance of the :data:`COUNTERS` classes made while it is entered (their counters are read
    after the run)."""

    def __init__(self) -> None:
        self.made: list[tuple[Any, str]] = []
        self._patched: list[tuple[type, Any]] = []

    def __enter__(self) -> Instances:
        import importlib

        for where, attr in COUNTERS:
            mod, name = where.split(":")
            cls = getattr(importlib.import_module(mod), name)
            orig = cls.__init__

            def init(obj: Any, *a: Any, __orig: Any = orig, __attr: str = attr, **kw: Any) -> None:
                __orig(obj, *a, **kw)
                self.made.append((obj, __attr))

            self._patched.append((cls, orig))
            cls.__init__ = init
        return self

    def __exit__(self, *exc: Any) -> None:
        for cls, orig in self._patched:
            cls.__init__ = orig

    def transfers(self) -> dict[str, float] | None:
        """Summed counters (``h2d_calls``, ``h2d_models``, …), or None when no instance has one."""
        total: dict[str, float] = {}
        found = False
        seen: set[int] = set()
        for obj, attr in self.made:
            counter: Any = obj
            for part in attr.split("."):
                counter = getattr(counter, part, None)
            if counter is None or id(counter) in seen:  # (a device host shares its counter with its trainers)
                continue
            seen.add(id(counter))
            if hasattr(counter, "as_dict"):
                counter = counter.as_dict()
            if isinstance(counter, dict):
                found = True
                for key, value in counter.items():
                    total[key] = total.get(key, 0.0) + float(value)
        return total if found else None


class SameData:
    """Builds each synthetic data set once per process: the recipe's 60,000 CIFAR-shaped samples take seconds
    to draw, and the calibration and comparison runs need the same ones again. A repeated build returns the
    arrays of the first and leaves the generator where the build left it, so the run is the same as with a
    fresh build. Only runs whose start-up is not a figure use it (the measured e2e runs build their own data)."""

    _kept: dict[Any, tuple[Any, Any]] = {}

    def __init__(self, config_class: type) -> None:
        self.cls = config_class

    def __enter__(self) -> SameData:
        kept, orig = self._kept, self.cls.build

        def build(config: Any, num_devices: int, rng: Any) -> Any:
            key = (type(config).__name__, config.model_dump_json(), int(num_devices), json.dumps(rng.bit_generator.state))
            if key not in kept:
                data = orig(config, num_devices, rng)
                kept[key] = (data, rng.bit_generator.state)
            data, after = kept[key]
            rng.bit_generator.state = after
            return data

        self._orig = orig
        self.cls.build = build
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cls.build = self._orig


def recipe_run(sizes: Sizes, rounds: int, precision: str, fast_path: bool, evaluate: bool = True,
               keep_model: bool = False, same_data: bool = False) -> dict[str, Any]:
    """One run of the recipe (:data:`RECIPE`) on the local executor: wall seconds, seconds per round
    (aggregation to aggregation), start-up (the wall time before the first round's aggregation less one
    round), final accuracy, transfers per round; ``keep_model``: the final model too; ``same_data``: the
    data set of an earlier run with the same settings (:class:`SameData`)."""
    import contextlib

    from hierfl.driver.run import run_scenario
    from hierfl.scenario.loader import load_scenario

    sets = [f"stop.rounds={rounds}", "runtime.executor=local", "runtime.checkpoint.enabled=false",
            f"runtime.device={sizes.device}", f"runtime.precision={precision}",
            f"runtime.fast_path={str(fast_path).lower()}", f"model.hidden={sizes.hidden}", *sizes.overrides]
    if not evaluate:
        sets.append("evaluation.every_s=null")  # at start and end only
    scenario = load_scenario(RECIPE, sets)
    data = SameData(type(scenario.data.dataset)) if same_data else contextlib.nullcontext()
    with tempfile.TemporaryDirectory() as tmp, Instances() as made, data:
        t0 = time.perf_counter()
        run_scenario(scenario, tmp)
        wall = time.perf_counter() - t0
        events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
        summary = json.loads((Path(tmp) / "summary.json").read_text())
        model = np.load(Path(tmp) / "final_model.npy") if keep_model else None
    aggs = [e["wall_s"] for e in events if e.get("event") == "cloud_aggregate"]
    per_round = (aggs[-1] - aggs[0]) / (len(aggs) - 1) if len(aggs) > 1 else (aggs[0] if aggs else wall)
    counts = made.transfers()
    out = {"rounds": rounds, "precision": precision, "fast_path": fast_path, "wall_s": wall,
           "s_per_round": per_round, "startup_s": max((aggs[0] if aggs else wall) - per_round, 0.0),
           "final_accuracy": summary.get("final_accuracy"),
           "transfers_per_round": None if counts is None else {key: v / rounds for key, v in counts.items()}}
    if model is not None:
        out["model"] = model
    return out


def e2e(sizes: Sizes, precision: str, want: int, share: float) -> dict[str, Any]:
    """The recipe at ``precision``: a calibration run, then ``want`` rounds or as many as fit ``share``
    seconds (at least one more than the calibration), and the extrapolation to :data:`FULL_ROUNDS`."""
    calib = recipe_run(sizes, sizes.calib_rounds, precision, True, same_data=True)
    budget = share - calib["wall_s"] - calib["startup_s"]
    fit = int(budget / max(calib["s_per_round"], 1e-9))
    rounds = max(min(want, fit), sizes.calib_rounds + 1)
    run = recipe_run(sizes, rounds, precision, True)
    extrapolated = run["wall_s"] + run["s_per_round"] * (FULL_ROUNDS - rounds)
    return {"precision": precision, "calibration": calib, "rounds": rounds, "measured_s": run["wall_s"],
            "s_per_round": run["s_per_round"], "startup_s": run["startup_s"],
            "extrapolated_1500_s": extrapolated, "final_accuracy": run["final_accuracy"],
            "transfers_per_round": run["transfers_per_round"]}


def compare(sizes: Sizes, share: float) -> dict[str, Any]:
    """The first rounds batched and job by job (fp32, the same seed): the largest differences, and whether
    they are within :data:`TOLERANCE`. Job by job is calibrated on one round first and shortened to fit
    ``share`` seconds when it would not."""
    probe = recipe_run(sizes, 1, "fp32", False, evaluate=False, same_data=True)
    fit = int((share / 2 - probe["startup_s"]) / max(probe["wall_s"] - probe["startup_s"], 1e-9))
    rounds = max(1, min(sizes.compare_rounds, fit))
    batched = recipe_run(sizes, rounds, "fp32", True, evaluate=False, keep_model=True, same_data=True)
    alone = recipe_run(sizes, rounds, "fp32", False, evaluate=False, keep_model=True, same_data=True)
    diff = float(np.abs(batched["model"] - alone["model"]).max())
    acc = abs(float(batched["final_accuracy"]) - float(alone["final_accuracy"]))
    return {"rounds": rounds, "max_abs_param_diff": diff, "max_abs_param": float(np.abs(alone["model"]).max()),
            "accuracy_batched": batched["final_accuracy"], "accuracy_alone": alone["final_accuracy"],
            "accuracy_diff": acc, "tolerance": dict(TOLERANCE),
            "within": bool(diff <= TOLERANCE["max_abs_param"] and acc <= TOLERANCE["accuracy"]),
            "s_batched": batched["wall_s"], "s_alone": alone["wall_s"]}


def cuda_tests() -> dict[str, Any] | None:
    """Run the ``cuda`` tests of :data:`CUDA_TESTS` with pytest in a child process: the last line of its report
    and its exit status (None when pytest does not import)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("pytest") is None:
        return None
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", *CUDA_TESTS]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TESTS_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stdout or b"")[-2000:]
        return {"returncode": None, "summary": f"timed out after {TESTS_TIMEOUT_S} s",
                "tail": tail.decode(errors="replace") if isinstance(tail, bytes) else tail}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"returncode": done.returncode, "summary": lines[-1] if lines else "", "tail": done.stdout[-4000:]}


# -- report ----------------------------------------------------------------------------------------------------


def environment(device: str) -> dict[str, Any]:
    import torch

    cuda = device.startswith("cuda")
    return {"python": platform.python_version(), "torch": torch.__version__, "device": device,
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "bf16_supported": bool(torch.cuda.is_bf16_supported()) if cuda else None,
            "threads": torch.get_num_threads()}


def markdown(res: dict[str, Any]) -> str:
    """The result as a short markdown page."""
    env = res["environment"]
    lines = [f"# hierfl GPU check ({env['gpu'] or env['device']}, torch {env['torch']}, Python {env['python']})", "",
             "## Batched trainer against the vmap floor (pfl_cnn)", "",
             "| precision | K | S | B | hierfl steps/s | floor steps/s | ratio (goal ≥ 0.8) |", "|---|---|---|---|---|---|---|"]
    for m in res["micro"]:
        lines.append(f"| {m['precision']} | {m['K']} | {m['S']} | {m['B']} | {m['hierfl_steps_per_s']:.1f} | "
                     f"{m['floor_steps_per_s']:.1f} | {m['ratio']:.2f} |")
    lines += ["", "## The CIFAR-10 recipe end to end (pfl_cnn, local executor, batched)", "",
              "| precision | rounds run | measured s | s/round | extrapolated to 1,500 s | goal s |", "|---|---|---|---|---|---|"]
    for e in res["e2e"]:
        goal = GOALS["bf16_s"] if e["precision"] == "bf16" else GOALS["fp32_s"]
        lines.append(f"| {e['precision']} | {e['rounds']} | {e['measured_s']:.1f} | {e['s_per_round']:.4f} | "
                     f"{e['extrapolated_1500_s']:.1f} | {goal:.0f} |")
    c = res["compare"]
    lines += ["", f"## Batched against job by job, first {c['rounds']} rounds (fp32)", "",
              f"largest parameter difference {c['max_abs_param_diff']:.3g} (largest parameter {c['max_abs_param']:.3g}), "
              f"accuracy {c['accuracy_batched']} batched, {c['accuracy_alone']} job by job; tolerance "
              f"{c['tolerance']}: {'within' if c['within'] else 'OUTSIDE'}", "",
              "## Host↔device copies per round (batched trainer)", "",
              f"{json.dumps(res['transfers_per_round']) if res['transfers_per_round'] is not None else 'no counter in this tree'}",
              "", "## CUDA tests", "",
              "not run" if res.get("tests") is None else f"{res['tests']['summary']} (exit status {res['tests']['returncode']})",
              "", f"total seconds: {res['seconds']:.1f}", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="every section on the CPU with tiny sizes (seconds)")
    ap.add_argument("--device", default=None, help="torch device (default: cuda, or cpu with --smoke)")
    ap.add_argument("--budget", type=float, default=None, help="seconds for sections 1-4 (default 200)")
    ap.add_argument("--no-tests", action="store_true", help="leave out the CUDA tests (section 5)")
    ap.add_argument("--out", default=os.environ.get("OUT") or None, help="folder for gpu_check.json / .md ($OUT)")
    args = ap.parse_args(argv)
    import torch

    sizes = Sizes.smoke() if args.smoke else Sizes(device="cuda")
    if args.device is not None:
        sizes = Sizes(**{**sizes.__dict__, "device": args.device})
    if args.budget is not None:
        sizes = Sizes(**{**sizes.__dict__, "budget": args.budget})
    if sizes.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("gpu_check: CUDA is not available here (torch.cuda.is_available() is false); "
                         "use --smoke for the CPU check")
    torch.set_num_threads(1)  # as a run's hosts (runtime.torch_threads: 1)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"environment": environment(sizes.device), "smoke": bool(args.smoke),
                           "goals": GOALS, "micro": []}
    print(json.dumps(res["environment"]), flush=True)
    precisions = ["fp32", "bf16"]
    for precision in precisions:
        row = micro(sizes, precision)
        res["micro"].append(row)
        print(f"micro {precision}: hierfl {row['hierfl_steps_per_s']:.1f} client-steps/s, floor "
              f"{row['floor_steps_per_s']:.1f}, ratio {row['ratio']:.2f} (goal >= {GOALS['ratio']})", flush=True)
    left = sizes.budget - (time.perf_counter() - t0)
    res["e2e"] = []
    for precision, want, share in (("bf16", sizes.bf16_rounds, 0.45 * left), ("fp32", sizes.fp32_rounds, 0.25 * left)):
        row = e2e(sizes, precision, want, share)
        res["e2e"].append(row)
        goal = GOALS[f"{precision}_s"]
        print(f"e2e {precision}: {row['rounds']} rounds in {row['measured_s']:.1f} s ({row['s_per_round']:.4f} s/round, "
              f"start-up {row['startup_s']:.1f} s) -> {row['extrapolated_1500_s']:.1f} s for {FULL_ROUNDS} "
              f"(goal <= {goal:.0f} s), accuracy {row['final_accuracy']}", flush=True)
    res["transfers_per_round"] = res["e2e"][0]["transfers_per_round"]
    print(f"transfers per round (bf16 run): {res['transfers_per_round'] if res['transfers_per_round'] is not None else 'no counter in this tree'}",
          flush=True)
    left = sizes.budget - (time.perf_counter() - t0)
    res["compare"] = compare(sizes, max(left, 1.0))
    c = res["compare"]
    print(f"compare {c['rounds']} rounds: max |param diff| {c['max_abs_param_diff']:.3g}, accuracy "
          f"{c['accuracy_batched']} vs {c['accuracy_alone']}: {'within' if c['within'] else 'OUTSIDE'} {c['tolerance']}",
          flush=True)
    res["tests"] = None if args.smoke or args.no_tests else cuda_tests()
    if res["tests"] is not None:
        print(f"CUDA tests: {res['tests']['summary']} (exit status {res['tests']['returncode']})", flush=True)
    res["seconds"] = time.perf_counter() - t0
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.json").write_text(json.dumps(res, indent=1, default=str))
        (out / "gpu_check.md").write_text(markdown(res))
        print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    return res


if __name__ == "__main__":
    main()
