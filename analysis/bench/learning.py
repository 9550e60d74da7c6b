"""Batched local training benchmark: each model trained job by job and batched, side by side.

Micro mode (default): ``K`` clients, ``S`` local steps of batch ``B`` (one epoch over ``S·B``
samples each), from the same start, synthetic data. For each model

* ``logreg`` (784 → 10), ``mlp`` (784-200-200-10), ``cnn28`` (FedAvg's CNN, 28×28×1),
  ``cnn32`` (FedAvg's CNN, 32×32×3)

it times

* ``seq``: :meth:`LocalTrainer.train` per job (the single-job path, CPU only);
* ``chain``: the hand-written Linear-chain group trainer (:mod:`hierfl.learn.batched`; logreg/mlp);
* ``vmap``: :class:`hierfl.learn.vmapped.VmapTrainer` on CPU, and ``vmap-cuda`` on CUDA when present,

and prints client-steps/s (``K·S`` / wall seconds, median of ``--repeat``), the ratio to ``seq``
and the largest difference of a result from ``seq``'s. ``--precision bf16`` runs every path's forward
pass under bfloat16 autocast (``runtime.precision``; the Linear-chain trainer is fp32 only, so its
row is absent), and adds a ``seq-fp32`` row first: ratios and differences are then against
``seq-fp32``, the fp32 single-job path, so a row shows bf16's speed-up and its numerical effect.

Scenario mode (``--scenarios``): the CPU check that the fast path is never slower than job by job. For every
shipped scenario (``scenarios/*.yaml``; a file dataset that is absent counts with its known sample shape), at
the sizes it uses — its model, input shape and classes, batch size, local steps (at most ``--steps``) and
precision — ``K`` = ``--clients`` jobs are timed job by job (``alone``) and as the fast path trains them on a
CPU host (``fast``: the group trainer :func:`hierfl.runtime.device_host.group_trainers` picks for the
scenario, or job by job where it picks none), and with vmap (``vmap``: what ``runtime.cpu_batching: vmap``
would do). One row per distinct setting, with the scenarios that use it: client-steps/s of each, and the
ratios ``fast / alone`` (never below 1 within timing noise: the fast path groups a model on a CPU only where
that is faster) and ``vmap / alone``.

End-to-end mode (``--e2e``): pfl-research's CIFAR-10 recipe, ``scenarios/gpu_cifar10_fedavg.yaml``
— 1,000 devices, 50 per round (FedAvg), batch 10, 1 local epoch, 50 samples each, the FedAvg CNN on
synthetic 32×32×3 data, local executor — for ``--rounds`` rounds (the recipe runs 1,500; on CPU use
e.g. 3), evaluated at start and end only, job by job
and with ``runtime.fast_path`` (``--device`` for the batched path), printing wall seconds per round,
both at ``--precision`` (``runtime.precision``) and with the final accuracy (synthetic data: it
shows that the run learns, not CIFAR-10 accuracy). Needs no Ray: everything runs in this process.

Usage::

    python analysis/bench/learning.py [--models logreg,mlp,cnn28,cnn32] [--clients 16] [--steps 5]
                                      [--repeat 3] [--threads 1] [--no-cuda] [--precision fp32|bf16]
    python analysis/bench/learning.py --e2e [--rounds 3] [--device cpu|cuda|auto] [--threads 1]
                                            [--precision fp32|bf16]
    python analysis/bench/learning.py --scenarios [--clients 16] [--steps 5] [--repeat 3] [--only STEM,...]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hierfl.core.work import TrainSpec  # noqa: E402
from hierfl.learn.local import LocalTrainer, init_params  # noqa: E402
from hierfl.models import CNNConfig, LogRegConfig, MLPConfig  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "scenarios" / "gpu_cifar10_fedavg.yaml"
"""pfl-research's CIFAR-10 recipe, the workload of ``--e2e``."""

MODELS: dict[str, tuple[Any, tuple[int, ...]]] = {
    "logreg": (LogRegConfig(), (1, 28, 28)),
    "mlp": (MLPConfig(hidden=[200, 200]), (1, 28, 28)),
    "cnn28": (CNNConfig(), (1, 28, 28)),
    "cnn32": (CNNConfig(), (3, 32, 32)),
}


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def micro(name: str, clients: int, steps: int, batch: int, repeat: int, threads: int, cuda: bool,
          precision: str = "fp32") -> list[dict[str, Any]]:
    """One model's rows: seq, chain (Linear chains, fp32), vmap (CPU), vmap-cuda (when present), at
    ``precision``; with bf16 a ``seq-fp32`` row first, the reference of the ratios and differences."""
    from hierfl.learn.batched import BatchedTrainer
    from hierfl.learn.vmapped import VmapTrainer

    cfg, shape = MODELS[name]
    trainer = LocalTrainer(cfg, shape, 10, torch_threads=threads, precision=precision)
    n = steps * batch
    rng = np.random.default_rng(0)
    x = rng.normal(size=(clients * n, int(np.prod(shape)))).astype(np.float32)
    y = rng.integers(0, 10, clients * n)
    rows = [np.arange(k * n, (k + 1) * n) for k in range(clients)]
    seeds = list(range(100, 100 + clients))
    p0 = init_params(cfg, shape, 10, 0)
    params = [p0] * clients
    spec = TrainSpec(epochs=1, batch_size=batch, lr=0.05, momentum=0.9)
    out = np.empty((clients, trainer.num_params), dtype=np.float32)

    def seq(trainer: LocalTrainer = trainer) -> np.ndarray:
        for k in range(clients):
            trainer.train(p0, x, y, spec, seeds[k], rows=rows[k], out=out[k])
        return out.copy()

    runners: dict[str, Any] = {}
    if precision != "fp32":
        fp32 = LocalTrainer(cfg, shape, 10, torch_threads=threads)
        runners["seq-fp32"] = lambda: seq(fp32)
    runners["seq"] = seq
    chain = BatchedTrainer.of(trainer)  # None under bf16: the hand-written trainer is fp32 only
    if chain is not None:
        def run_chain() -> np.ndarray:
            chain.train_group(params, x, y, rows, spec, seeds, out)
            return out.copy()
        runners["chain"] = run_chain
    devices = ["cpu"] + (["cuda"] if cuda else [])
    for dev in devices:
        vt = VmapTrainer(trainer, dev)

        def run_vmap(vt: VmapTrainer = vt, dev: str = dev) -> np.ndarray:
            vt.train_group(params, x, y, rows, spec, seeds, out)
            _sync(dev)
            return out.copy()
        runners["vmap" if dev == "cpu" else "vmap-cuda"] = run_vmap
    ref = None
    rows_out = []
    for label, fn in runners.items():
        result = fn()  # warm-up (and the result checked)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        dt = statistics.median(times)
        if ref is None:
            ref = result
        rows_out.append({"model": name, "path": label, "precision": "fp32" if label == "seq-fp32" else precision,
                         "K": clients, "S": steps, "B": batch,
                         "client_steps_per_s": clients * steps / dt,
                         "max_abs_diff_vs_seq": float(np.abs(result - ref).max())})
    base = rows_out[0]["client_steps_per_s"]
    for r in rows_out:
        r["ratio_vs_seq"] = r["client_steps_per_s"] / base
    return rows_out


KNOWN_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "mnist": ((1, 28, 28), 10), "fashion_mnist": ((1, 28, 28), 10), "femnist": ((1, 28, 28), 62),
    "cifar10": ((3, 32, 32), 10), "shakespeare": ((80,), 80)}
"""Sample shape and classes of the file datasets (EMNIST: by split), used when their files are absent."""

EMNIST_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}


def _data_shape(dataset: Any, count: int) -> tuple[tuple[int, ...], int, int | None]:
    """``(sample shape, classes, vocabulary)`` of a scenario's dataset: the known ones of a file dataset, else
    from a build with at most 200 samples (the shape does not depend on the count)."""
    name = dataset.name
    if name == "emnist":
        return (1, 28, 28), EMNIST_CLASSES[dataset.split], None
    if name in KNOWN_SHAPES:
        shape, classes = KNOWN_SHAPES[name]
        return shape, classes, (classes if name == "shakespeare" else None)
    small = {k: min(int(getattr(dataset, k)), 200) for k in ("num_samples", "test_samples")
             if isinstance(getattr(dataset, k, None), int)}
    built = dataset.model_copy(update=small).build(count, np.random.default_rng(0))
    return tuple(built.input_shape), int(built.num_classes), built.vocab_size


def scenario_settings(only: set[str] | None, max_steps: int) -> dict[str, dict[str, Any]]:
    """The distinct local-training settings of the shipped scenarios: key → model, shape, classes, batch, steps,
    precision, CPU batching and the scenarios that use it. Scenarios whose jobs are not plain local SGD
    (timing only, a job method of its own) are left out: their jobs never group."""
    from hierfl.assemble.assemble import train_spec
    from hierfl.core.work import effective_batch, num_steps
    from hierfl.scenario.loader import load_scenario

    settings: dict[str, dict[str, Any]] = {}
    for path in sorted((RECIPE.parent).glob("*.yaml")):
        if only and path.stem not in only:
            continue
        sc = load_scenario(path, ["runtime.executor=local"])
        trainer = sc.training.trainer
        if getattr(trainer, "name", "sgd") != "sgd":  # none (timing only) or a method's own jobs
            continue
        count = int(sc.devices.count)
        shape, classes, vocab = _data_shape(sc.data.dataset, count)
        samples = max(1, int(getattr(sc.data.dataset, "num_samples", 0) or 50 * count) // count)
        try:
            spec = train_spec(sc)  # the job's spec as the run builds it (its steps, batch, optimiser)
        except Exception as exc:  # noqa: BLE001 - a scenario whose spec needs the run's world: named, not timed
            print(f"# {path.stem}: left out ({exc})", flush=True)
            continue
        if spec.method is not None or spec.epochs is None and spec.steps is None:
            continue  # a job method's own jobs, or a per-job length drawn at run time
        steps = min(num_steps(samples, spec), max_steps)
        batch = effective_batch(samples, spec)
        rt = sc.runtime
        key = json.dumps([sc.model.model_dump(mode="json"), shape, classes, batch, steps, rt.precision,
                          rt.cpu_batching, spec.optimizer, spec.momentum, spec.weight_decay, spec.clip_norm,
                          spec.nesterov, spec.proximal], sort_keys=True)
        entry = settings.setdefault(key, {"model": sc.model, "shape": shape, "classes": classes, "vocab": vocab,
                                          "batch": batch, "steps": steps, "precision": rt.precision,
                                          "cpu_batching": rt.cpu_batching, "spec": spec,
                                          "scenarios": []})
        entry["scenarios"].append(path.stem)
    return settings


def scenario_rows(clients: int, repeat: int, threads: int, only: set[str] | None, max_steps: int) -> list[dict[str, Any]]:
    """For each distinct setting of :func:`scenario_settings`: client-steps/s job by job, as the fast path
    trains on a CPU host, and with vmap; the ratios to job by job."""
    from hierfl.learn.vmapped import VmapTrainer
    from hierfl.runtime.device_host import group_trainers

    rows = []
    for entry in scenario_settings(only, max_steps).values():
        cfg, shape, classes, b, s = entry["model"], entry["shape"], entry["classes"], entry["batch"], entry["steps"]
        trainer = LocalTrainer(cfg, shape, classes, torch_threads=threads, precision=entry["precision"])
        n = s * b
        rng = np.random.default_rng(0)
        features = int(np.prod(shape))
        if entry["vocab"] is not None:  # token models read character indices
            x = rng.integers(0, entry["vocab"], size=(clients * n, features)).astype(np.float32)
        else:
            x = rng.normal(size=(clients * n, features)).astype(np.float32)
        y = rng.integers(0, classes, clients * n)
        rows_k = [np.arange(k * n, (k + 1) * n) for k in range(clients)]
        seeds = list(range(100, 100 + clients))
        p0 = init_params(cfg, shape, classes, 0)
        # one epoch of S steps of the scenario's optimiser (its momentum, Adam, weight decay, clip)
        spec = replace(entry["spec"], epochs=1, steps=None, batch_size=b, frozen=0, method=None, shared=None,
                       revealed=None)
        out = np.empty((clients, trainer.num_params), dtype=np.float32)
        # the host's own choice for this scenario (runtime.fast_path on, the CPU, its precision and cpu_batching)
        model_spec = (cfg, shape, classes, threads, True, "cpu", entry["precision"], entry["cpu_batching"])
        batched, vmapped = group_trainers(trainer, model_spec, "cpu")
        chosen = batched if batched is not None else vmapped
        path = "chain" if batched is not None else "vmap" if vmapped is not None else "alone"

        def alone() -> None:
            for k in range(clients):
                trainer.train(p0, x, y, spec, seeds[k], rows=rows_k[k], out=out[k])

        def group(t: Any) -> Callable[[], None]:
            return lambda: t.train_group([p0] * clients, x, y, rows_k, spec, seeds, out)

        def steps_per_s(fn: Callable[[], None]) -> float:
            fn()  # warm-up
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return clients * s / statistics.median(times)

        base = steps_per_s(alone)
        fast = base if chosen is None else steps_per_s(group(chosen))
        vmap = fast if path == "vmap" else steps_per_s(group(VmapTrainer(trainer, "cpu")))
        rows.append({"mode": "scenarios", "model": cfg.model_dump(mode="json"), "shape": list(shape),
                     "classes": classes, "K": clients, "S": s, "B": b, "precision": entry["precision"],
                     "fast_path": path, "alone_steps_per_s": base, "fast_steps_per_s": fast, "vmap_steps_per_s": vmap,
                     "fast_ratio": fast / base, "vmap_ratio": vmap / base, "scenarios": entry["scenarios"]})
    return rows


def e2e(rounds: int, device: str, threads: int, precision: str = "fp32") -> list[dict[str, Any]]:
    """pfl-research's CIFAR-10 recipe shape on the local executor: seconds per round, job by job and batched,
    at ``precision`` (``runtime.precision``)."""
    import tempfile

    from hierfl.driver.run import run_scenario
    from hierfl.scenario.loader import load_scenario

    out = []
    for fast in (False, True):
        # the shipped recipe scenario (CIFAR-shaped synthetic data), shortened, on the local executor
        scenario = load_scenario(RECIPE, [f"stop.rounds={rounds}", "evaluation.every_s=null",  # at start and end
                                          "runtime.executor=local", f"runtime.torch_threads={threads}",
                                          f"runtime.fast_path={str(fast).lower()}", f"runtime.device={device}",
                                          f"runtime.precision={precision}", "runtime.checkpoint.enabled=false"])
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            run_scenario(scenario, tmp)
            wall = time.perf_counter() - t0
            events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
            accuracy = json.loads((Path(tmp) / "summary.json").read_text())["final_accuracy"]
        # training rounds only: from the first evaluation's end to the last event before the final one
        evals = [k for k, e in enumerate(events) if e.get("event") == "eval"]
        first, last = events[evals[0]]["wall_s"], events[evals[-1] - 1]["wall_s"]
        out.append({"mode": "e2e", "fast_path": fast, "device": device if fast else "cpu", "precision": precision,
                    "rounds": rounds, "wall_s": wall, "train_s": last - first, "s_per_round": (last - first) / rounds,
                    "final_accuracy": accuracy})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="logreg,mlp,cnn28,cnn32")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-cuda", action="store_true")
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--scenarios", action="store_true",
                    help="CPU: every shipped scenario's setting, job by job against the fast path and vmap")
    ap.add_argument("--only", default=None, help="--scenarios: these scenario stems only (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="runtime.precision of the timed paths (bf16: forward under bfloat16 autocast)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available() and not args.no_cuda
    print(f"# torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} thread(s), "
          f"cuda: {torch.cuda.get_device_name(0) if cuda else 'none'}, precision: {args.precision}")
    rows: list[dict[str, Any]] = []
    if args.scenarios:
        print(f"{'model':34} {'shape':11} {'prec':4} {'K':>3} {'S':>2} {'B':>3} {'fast':5} {'alone/s':>9} "
              f"{'fast/s':>9} {'vmap/s':>9} {'fast x':>6} {'vmap x':>6}  scenarios")
        only = set(args.only.split(",")) if args.only else None
        for r in scenario_rows(args.clients, args.repeat, args.threads, only, args.steps):
            rows.append(r)
            label = json.dumps(r["model"], separators=(",", ":"))[:34]
            print(f"{label:34} {'x'.join(map(str, r['shape'])):11} {r['precision']:4} {r['K']:3d} {r['S']:2d} "
                  f"{r['B']:3d} {r['fast_path']:5} {r['alone_steps_per_s']:9.1f} {r['fast_steps_per_s']:9.1f} "
                  f"{r['vmap_steps_per_s']:9.1f} {r['fast_ratio']:6.2f} {r['vmap_ratio']:6.2f}  "
                  f"{','.join(r['scenarios'])}", flush=True)
    elif args.e2e:
        rows = e2e(args.rounds, args.device, args.threads, args.precision)
        for r in rows:
            print(f"e2e fast_path={r['fast_path']!s:5} device={r['device']:4} precision={r['precision']} "
                  f"rounds={r['rounds']} run wall={r['wall_s']:.1f}s (build, 2 evaluations included)  "
                  f"rounds: {r['train_s']:.1f}s, {r['s_per_round']:.2f} s/round, final accuracy {r['final_accuracy']:.4f}")
    else:
        print(f"{'model':7} {'path':10} {'prec':4} {'K':>4} {'S':>3} {'B':>3} {'steps/s':>10} {'x seq':>7} "
              f"{'max|diff|':>10}")
        for name in args.models.split(","):
            for r in micro(name, args.clients, args.steps, args.batch, args.repeat, args.threads, cuda, args.precision):
                rows.append(r)
                print(f"{r['model']:7} {r['path']:10} {r['precision']:4} {r['K']:4d} {r['S']:3d} {r['B']:3d} "
                      f"{r['client_steps_per_s']:10.1f} {r['ratio_vs_seq']:7.2f} {r['max_abs_diff_vs_seq']:10.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
