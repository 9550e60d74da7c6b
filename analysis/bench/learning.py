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
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
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
    if args.e2e:
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
