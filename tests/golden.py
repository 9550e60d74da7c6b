"""Golden outputs of the shipped scenarios: readable snapshots compared within stated tolerances.

Each shipped scenario runs with short limits (:data:`GOLDEN_OVERRIDES`; a scenario too big for the
suite even then is also shrunk, :data:`SCENARIO_OVERRIDES`). Its outputs are reduced
to a small, readable snapshot (:func:`snapshot`), one committed JSON file per scenario under
``tests/golden/``:

* ``summary``: ``summary.json`` without its wall-clock and executor fields;
* ``metrics``: how many lines of each event ``metrics.jsonl`` has, its first and last few lines
  and its evaluation lines (wall-clock fields dropped);
* ``trace``: per trace category and name, the event count and the summed durations;
* ``devices``: ``devices.csv``'s row count and column totals;
* ``clusters``: ``clusters.jsonl``'s line count, reasons and last grouping;
* ``model``: the final model's size, finiteness and L2 norm.

A comparison (:func:`compare`) walks both snapshots and prints one line per field that differs,
with a tolerance chosen by the field's kind (:func:`kind_of`):

* counts, ids, names and flags: exact;
* emulated times and other quantities computed from the scenario alone: 1e-9 relative;
* values computed from the model's numbers (accuracy, loss, the model's norm): the learning
  tolerance, :data:`LEARN_ABS` absolute, plus :data:`LEARN_REL` relative for losses and norms.

A scenario whose control flow reads model values (a robust rule's selections, WSCC's clusters, an
update dropped for not being finite, a stop on target accuracy) lists those outputs in
:data:`MODEL_DEPENDENT`. When one of them differs, the run took another path from that decision
on: every difference is reported, and only learning values beyond the learning tolerance fail.

Bit-identity is a different contract, held on one machine: tests compare two runs made in the
same session (local against Ray, resumed against uninterrupted), never stored bits.

Record the snapshots (when outputs are meant to change; the diff of the files is the review)::

    .venv/bin/python -m tests.golden --update [STEM ...]

Compare this machine's runs with them, printing every difference::

    .venv/bin/python -m tests.golden --check [STEM ...]
"""

from __future__ import annotations

import csv
import fnmatch
import json
import math
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
GOLDEN_DIR = ROOT / "tests" / "golden"

# short runs: two cloud aggregations (or the scenario's own time budget, if that comes first)
GOLDEN_OVERRIDES = ["stop.rounds=2", "stop.target_accuracy=null"]
# further --set items of one scenario's golden runs, after GOLDEN_OVERRIDES
SCENARIO_OVERRIDES: dict[str, tuple[str, ...]] = {
    # pfl-research's CIFAR-10 recipe: 1,000 devices x 50 CIFAR-shaped samples (0.6 GB) and 10,000
    # test samples are too big for the suite even for two rounds; 60 devices x 50 (3 jobs a round,
    # one batched group) and 300 test samples keep its shape and take a few seconds on one CPU
    # (training is nearly all of a run's time, and it grows with the jobs a round).
    # device cpu: `auto` would train on a GPU where the local run sees one, but not in Ray actors
    # that reserve none (Ray hides the GPUs from them), and the Ray run must give the local bits;
    # cpu_batching vmap: the CNN's jobs still train batched on the CPU, the path a GPU takes
    # training lr 0.03 and 5 epochs: the recipe's lr 0.1 and 1 epoch (5 steps a job) leave the shrunk
    # CNN near chance after 2 rounds, where last-bit differences between CPU kernels move the
    # accuracy by 5-7 points (0.15 with AVX-512, 0.20-0.22 with ATEN_CPU_CAPABILITY=default); lr 0.03
    # for 25 steps a job reaches accuracy 1.0 (loss 1.02-1.04) under both, the losses 0.3 % apart; fewer
    # steps a job (10 at lr 0.05 or 0.1) leave it at 0.2-0.7 with the loss barely moved
    "gpu_cifar10_fedavg": ("devices.count=60", "data.dataset.num_samples=3000", "data.dataset.test_samples=300",
                           "runtime.device=cpu", "runtime.cpu_batching=vmap", "training.lr=0.03", "training.epochs=5"),
    # pfl-research's CIFAR-10 benchmark with pfl_cnn: 20 devices x 10 samples of 3x8x8 (the CNN's smallest
    # shape has 6x6), hidden 16, 40 test samples, 5 jobs a round as one group; on the CPU with vmap (the GPU's
    # batched path, dropout masks from each job's seed), device cpu so that the Ray run gives the local bits
    "gpu_pfl_cifar10": ("devices.count=20", "data.dataset.num_samples=200", "data.dataset.test_samples=40",
                        "data.dataset.shape=[3,8,8]", "model.hidden=16", "protocol.fraction=0.25",
                        "runtime.device=cpu", "runtime.cpu_batching=vmap"),
    # 24 devices x 2 edge rounds, each upload and download of a 46 K-parameter MLP top-k and QSGD coded: a few
    # seconds; 9 devices (3 per edge server) and a 64x64 MLP keep the hierarchy and both channels, well under 1 s
    "topk_ef_hierfavg": ("devices.count=9", "model.hidden=[64,64]"),
    # the GPU layout recipe on any machine: no GPU reserved (the placement check would refuse a machine
    # without one), on the CPU with vmap (the GPU's batched path), 8 devices
    "gpu_ray_hosts": ("runtime.gpus_per_host=0", "runtime.device=cpu", "runtime.cpu_batching=vmap",
                      "devices.count=8"),
    # FedFTG with the authors' settings generates a batch of 50 (the client batch) in each of 4 iterations
    # over every teacher: about 1.5 s a run; one iteration of 16 samples keeps the generator, the distillation
    # and the Bernoulli rounds with their decayed rates, well under 0.5 s
    "fedftg_reference": ("protocol.iters=1", "protocol.batch_size=16"),
    # FedHiSyn's fast devices run ring unit after ring unit for T seconds: about 15,700 events in two rounds of
    # the shipped 60 devices and T 10; 30 devices and T 3 keep the three capacity classes, the rings, the
    # device-to-device hops and the time weighting (and still leave slow devices out of a round) in a sixth
    # of the events
    "fedhisyn": ("devices.count=30", "protocol.T=3"),
    # the same, with the deadline scaled with T (8 s of 10 -> 2.4 s of 3): the rounds still close at the
    # deadline, before the windows of plain T would end, and every device that finished a unit is in
    "fedhisyn_deadline": ("devices.count=30", "protocol.T=3", "straggler.seconds=2.4"),
    # the same 30 devices and T 3: the slowdown at t = 2 s falls in the first round, whose close re-forms the
    # classes (6 devices move, 3 of them slowed ones; their migration downloads are charged)
    "fedhisyn_recluster": ("devices.count=30", "protocol.T=3"),
    # 16 devices behind 4 edges run 1,280 FedAlign steps (each with its slim pass) in two cloud rounds; 8
    # devices behind 2 edges keep the hierarchy, the slimmed block and the spectral penalty in half of them
    "fedalign_hierfavg": ("devices.count=8", "topology.edge_servers=2"),
    # real digits with a small CNN behind 2 edges: 6 devices instead of 12 halve the training and keep
    # the hierarchy and the label skew; with its lr 0.1 and momentum (see its YAML) it still learns well
    # clear of chance in two rounds (0.68, loss 1.0) and the forced kernels of
    # tests/determinism/test_portability.py stay within the learning tolerance
    "digits_cnn": ("devices.count=6",),
    # DisTrans in the hierarchy: 6 devices (3 per edge) instead of 10, each with its own offset and local
    # test split, in 60 % of the steps
    "distrans_hierfavg": ("devices.count=6",),
    # serverless gossip runs have no rounds, so only their time budget ends them, and on Ray each of their many
    # small jobs and exchanges is a call: D-PSGD's ring is at 0.81 after 15 s of its 30 (0.88 at the end),
    # AD-PSGD's torus has converged (0.875) by 9 s of its 30, and the random geometric graph has lost devices
    # to the Markov availability (and wasted their compute) well before 20 s of its 40
    "dpsgd_ring": ("stop.virtual_time_s=15",),
    "adpsgd_torus": ("stop.virtual_time_s=10",),
    "p2p_rgg": ("stop.virtual_time_s=20",),
    # link contention: 24 devices (about 6 an edge) instead of 60 still upload together at each edge round's
    # end and share the edge's 10 Mbit/s ingress (up to 9 transfers at once), in 40 % of the training
    "hierfavg_contention": ("devices.count=24",),
    # FCCL aligns the parties' logits on the public digits one batch of 50 at a time, each batch a barrier and a
    # job per party: 100 public digits (2 batches a round) instead of 200 keep the barriers, the distillation
    # and the domain-split evaluation with half the jobs (36 instead of 68, each a call on Ray)
    "fccl": ("protocol.public_size=100",),
}
# further --set items of a scenario in the tests that check a property any run of it must have, whatever its
# size (tests/determinism/test_contract.py: the learning rate moves no time or count; tests/driver/
# test_timing_only.py: timing only gives the trained run's times; tests/driver/test_detached_flows.py: detaching
# flows changes no output); never in the golden runs themselves, which keep SCENARIO_OVERRIDES only
PROPERTY_OVERRIDES: dict[str, tuple[str, ...]] = {
    # FedHiSyn's fast devices run a ring unit after unit for T seconds: about 7,700 unit jobs in two rounds of the
    # shipped 60 devices and T 10; 30 devices and T 3 keep its three capacity classes, rings, device-to-device
    # hops and time weighting in a seventh of the jobs
    "fedhisyn": ("devices.count=30", "protocol.T=3"),
    # digits_cnn's 12 devices, each run twice: 6 devices behind the same 2 edges give every time, count and
    # selection from the scenario alone as well, in half the training
    "digits_cnn": ("devices.count=6",),
    # 60 devices sharing 4 edges' ingress: 24 (about 6 an edge) still upload together at each edge round's end
    # and share the 10 Mbit/s ingress (flows attach, re-share and detach)
    "hierfavg_contention": ("devices.count=24",),
}
# fields that depend on the machine, the executor or the wall clock, never on the emulation
VOLATILE = frozenset({"wall_s", "startup_s", "startup", "executor", "workers", "checkpoint_t", "resume"})
HEAD = 3  # metrics lines kept from the start and from the end
EVAL_KEEP = 8
MEMBERS_KEEP = 64  # a grouping's lists are kept whole up to this many entries  # evaluation lines kept from each end when a run has more than twice as many

# the learning tolerance: how far values computed from model numbers may move between machines
LEARN_ABS = 0.02
LEARN_REL = 0.02
# emulated times and everything else computed from the scenario alone
TIME_REL = 1e-9
TIME_ABS = 1e-12

# where values computed from the model's numbers sit: fnmatch patterns over "a.b[3].c" paths
# (accuracy and loss of any kind, a robust rule's distance to the honest mean, WSCC's weight
# similarities, the final model's norm, the spread of a serverless run's models)
LEARNING_PATHS = ("*accuracy*", "*loss*", "*.dist_*", "*.similarity.*", "model.l2", "*consensus_distance*")

# Outputs of decisions that read model values, per scenario stem (fnmatch patterns over paths).
# On another machine such a decision may come out differently; the run then takes another path
# from there, and only the learning tolerance is held (see compare).
_ROBUST = ("summary.robustness.tiers.*",)
MODEL_DEPENDENT: dict[str, tuple[str, ...]] = {
    # a robust rule's selections: which updates were accepted, rejected or clipped
    "byzantine": _ROBUST,
    "byzantine_hier": _ROBUST,
    # updates dropped because they were not finite
    "nonfinite_drop": (*_ROBUST, "*updates_dropped*", "*.rejected_nonfinite"),
    # WSCC's clusters come from the similarity of the devices' weights (affinity propagation)
    "wscc": ("clusters.last.members", "clusters.last.exemplars", "clusters.last.leaders", "clusters.last.sizes"),
    "wscc_edge": ("clusters.last.members", "clusters.last.exemplars", "clusters.last.leaders", "clusters.last.sizes"),
}
# in every scenario: a stop on target accuracy (the golden runs turn it off, users' runs may not)
ALWAYS_MODEL_DEPENDENT = ("*time_to_target_s", "*rounds_to_target")


def model_dependent(stem: str) -> tuple[str, ...]:
    """The model-dependent outputs of scenario ``stem``: its entry of :data:`MODEL_DEPENDENT`, the stop on target
    accuracy, and what the scenario itself declares: a transfer channel that charges measured lengths
    (``exact_bytes``) makes the contract's :data:`~hierfl.output.contract.MEASURED_BYTES_KEYS` of its summary
    model-dependent (and, through them, every upload time after the first length that differs)."""
    out = (*MODEL_DEPENDENT.get(stem, ()), *ALWAYS_MODEL_DEPENDENT)
    path = ROOT / "scenarios" / f"{stem}.yaml"
    if not path.exists():
        return out
    from hierfl.output.contract import MEASURED_BYTES_KEYS
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(path, ["runtime.executor=local"])
    placed = sc.channels.resolved(tuple(getattr(type(sc.protocol), "channel_links", ())))
    if any(ch.measures_bytes for ch in placed.values()):
        # the summary's byte counts, and the same counters in the metrics lines
        out = (*out, *(f"summary.{key}" for key in MEASURED_BYTES_KEYS), "metrics.*.bytes_*")
    return out


@dataclass(frozen=True)
class Difference:
    """One field that differs beyond its tolerance (``fatal``) or a model-dependent note."""

    path: str
    want: Any
    got: Any
    rule: str
    fatal: bool = True

    def __str__(self) -> str:
        tag = "" if self.fatal else " (model-dependent: reported, not failed)"
        return f"  {self.path}: expected {_short(self.want)}, got {_short(self.got)}  [{self.rule}]{tag}"


def _short(v: Any) -> str:
    text = json.dumps(v, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def overrides(executor: str, stem: str | None = None) -> list[str]:
    """The ``--set`` list of a golden run on ``executor`` (of scenario ``stem``: its :data:`SCENARIO_OVERRIDES` too)."""
    return [*GOLDEN_OVERRIDES, *SCENARIO_OVERRIDES.get(stem or "", ()), f"runtime.executor={executor}", "runtime.workers=2"]


def skip_reason(path: Path) -> str | None:
    """Why ``path`` cannot run here (dataset files absent), or None."""
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(path, ["runtime.executor=local"])
    root = getattr(sc.data.dataset, "root", None)
    if root is not None and not Path(root).exists():
        return f"dataset files not in {root}"
    return None


def golden_path(stem: str) -> Path:
    """The committed snapshot of scenario ``stem``."""
    return GOLDEN_DIR / f"{stem}.json"


# ---------------------------------------------------------------------------------------------
# snapshots


def _strip(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in VOLATILE}


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _grouping(rec: dict[str, Any]) -> dict[str, Any]:
    """A grouping line, with its large lists (members, cost matrices) cut to sizes and sums."""
    out: dict[str, Any] = {}
    for key, value in rec.items():
        leaves = _leaves(value) if isinstance(value, list) else []
        if len(leaves) <= MEMBERS_KEEP:
            out[key] = value
            continue
        if key == "members":
            out["sizes"] = [len(m) for m in value]
            out["first_members"] = [m[0] if m else None for m in value]
            continue
        nums = [v for v in leaves if isinstance(v, (int, float)) and not isinstance(v, bool)]
        out[key] = {"count": len(leaves), "sum": math.fsum(nums)}
    return out


def snapshot(run_dir: Path) -> dict[str, Any]:
    """The readable golden snapshot of a finished run's outputs (see the module docstring)."""
    import numpy as np

    summary = _strip(json.loads((run_dir / "summary.json").read_text(encoding="utf-8")))
    lines = [_strip(json.loads(s)) for s in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    evals = [rec for rec in lines if rec.get("event") == "eval"]
    if len(evals) > 2 * EVAL_KEEP:
        evals = evals[:EVAL_KEEP] + evals[-EVAL_KEEP:]
    metrics = {
        "lines": len(lines),
        "events": dict(sorted(Counter(str(rec.get("event")) for rec in lines).items())),
        "head": lines[:HEAD],
        "tail": lines[-HEAD:] if len(lines) > HEAD else [],
        "eval": evals,
    }

    trace: dict[str, dict[str, float | int]] = {}
    for ev in json.loads((run_dir / "trace.json").read_text(encoding="utf-8")):
        if ev.get("ph") == "M":
            continue
        key = f"{ev.get('cat')}/{ev.get('name')}"
        slot = trace.setdefault(key, {"count": 0, "dur_us": 0.0})
        slot["count"] += 1
        slot["dur_us"] += float(ev.get("dur", 0.0))
    trace = dict(sorted(trace.items()))

    with (run_dir / "devices.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    totals: dict[str, Any] = {}
    for col in rows[0] if rows else []:
        values = [_number(r[col]) for r in rows]
        if all(v is not None for v in values):
            totals[col] = math.fsum(values) if any(isinstance(v, float) for v in values) else sum(values)
        else:
            totals[col] = dict(sorted(Counter(r[col] for r in rows).items()))
    devices = {"rows": len(rows), "totals": totals}

    groupings = [json.loads(s) for s in (run_dir / "clusters.jsonl").read_text(encoding="utf-8").splitlines()]
    clusters = {
        "lines": len(groupings),
        "reasons": dict(sorted(Counter(str(g.get("reason")) for g in groupings).items())),
        "last": _grouping(groupings[-1]) if groupings else None,
    }

    model = np.load(run_dir / "final_model.npy")
    flat = np.asarray(model, dtype=np.float64).ravel()
    finite = bool(np.isfinite(flat).all())
    model_info = {
        "size": int(flat.size),
        "dtype": str(model.dtype),
        "finite": finite,
        "l2": float(np.sqrt(np.dot(flat, flat))) if finite else None,
    }
    return {
        "summary": summary,
        "metrics": metrics,
        "trace": trace,
        "devices": devices,
        "clusters": clusters,
        "model": model_info,
    }


# ---------------------------------------------------------------------------------------------
# bit-identity between two runs made in the same session

CONTRACT_FILES = ("metrics.jsonl", "summary.json", "final_model.npy", "trace.json", "devices.csv", "clusters.jsonl")


def contract_outputs(run_dir: Path) -> dict[str, bytes]:
    """The contract outputs of a run as bytes, wall-clock and executor fields taken out of
    ``metrics.jsonl`` and ``summary.json``: equal for two runs of one scenario on one machine."""
    out: dict[str, bytes] = {}
    for name in CONTRACT_FILES:
        raw = (run_dir / name).read_bytes()
        if name == "metrics.jsonl":
            recs = [_strip(json.loads(s)) for s in raw.decode("utf-8").splitlines()]
            raw = "\n".join(json.dumps(r, sort_keys=True) for r in recs).encode()
        elif name == "summary.json":
            raw = json.dumps(_strip(json.loads(raw)), sort_keys=True, indent=0).encode()
        out[name] = raw
    return out


def bit_differences(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    """For each contract output that differs between two runs, where it first differs."""
    out = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x == y:
            continue
        if x is None or y is None or name.endswith(".npy"):
            out.append(f"{name}: differs" + ("" if x and y else " (missing in one run)"))
            continue
        lx, ly = x.decode("utf-8").splitlines(), y.decode("utf-8").splitlines()
        i = next((i for i, (p, q) in enumerate(zip(lx, ly)) if p != q), min(len(lx), len(ly)))
        first = lx[i] if i < len(lx) else "<end>"
        second = ly[i] if i < len(ly) else "<end>"
        out.append(f"{name}: first differs at line {i + 1}:\n    {first[:200]}\n    {second[:200]}")
    return out


# ---------------------------------------------------------------------------------------------
# comparison


def kind_of(path: str) -> str:
    """``"learning"`` for values computed from model numbers, else ``"scenario"`` (see the docstring)."""
    return "learning" if any(fnmatch.fnmatchcase(path, pat) for pat in LEARNING_PATHS) else "scenario"


def _close(want: float, got: float, kind: str, leaf: str) -> tuple[bool, str]:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got), "both NaN"
    if math.isinf(want) or math.isinf(got):
        return want == got, "exact (infinite)"
    if kind == "learning":
        rel = 0.0 if "accuracy" in leaf else LEARN_REL  # accuracies are fractions: absolute only
        tol = LEARN_ABS + rel * abs(want)
        return abs(got - want) <= tol, f"learning tolerance {LEARN_ABS} abs" + (f" + {rel} rel" if rel else "")
    tol = TIME_ABS + TIME_REL * abs(want)
    return abs(got - want) <= tol, f"{TIME_REL:g} relative"


def compare(
    want: Any, got: Any, model_dependent: tuple[str, ...] = (), path: str = "", soft: bool = False
) -> list[Difference]:
    """Every difference between snapshot ``want`` (stored) and ``got`` beyond its tolerance.

    ``model_dependent`` patterns mark outputs of model-dependent decisions, and everything below
    them (``soft``): their differences are reported as not fatal, except in learning values.
    """
    out: list[Difference] = []
    soft = soft or (bool(path) and any(fnmatch.fnmatchcase(path, pat) for pat in model_dependent))
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in got:
                out.append(Difference(sub, want[key], "<missing>", "present", not soft))
            elif key not in want:
                out.append(Difference(sub, "<absent>", got[key], "present", not soft))
            else:
                out.extend(compare(want[key], got[key], model_dependent, sub, soft))
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [Difference(f"{path} (length)", len(want), len(got), "exact", not soft)]
        for i, (a, b) in enumerate(zip(want, got)):
            out.extend(compare(a, b, model_dependent, f"{path}[{i}]", soft))
        return out
    numeric = (int, float)
    if isinstance(want, numeric) and isinstance(got, numeric) and not isinstance(want, bool) and not isinstance(got, bool):
        kind = kind_of(path)
        leaf = path.rsplit(".", 1)[-1]
        if isinstance(want, int) and isinstance(got, int) and kind == "scenario":
            ok, rule = want == got, "exact"
        else:
            ok, rule = _close(float(want), float(got), kind, leaf)
        if not ok:  # a model-dependent count or time is reported; a learning value always fails
            out.append(Difference(path, want, got, rule, kind == "learning" or not soft))
        return out
    if want != got:
        # a learning value may be None where the other run had a number only if model-dependent
        out.append(Difference(path, want, got, "exact", not soft))
    return out


def report(stem: str, diffs: list[Difference]) -> str:
    """A readable, field-by-field report of ``diffs`` for scenario ``stem``."""
    fatal = [d for d in diffs if d.fatal]
    head = f"{stem}: {len(fatal)} field(s) differ beyond tolerance" if fatal else f"{stem}: within tolerance"
    return "\n".join([head, *map(str, diffs)])


# ---------------------------------------------------------------------------------------------
# running


def run_one(path: Path, executor: str, out_dir: Path) -> dict[str, Any]:
    """Run ``path`` with the golden limits on ``executor`` into ``out_dir``; its summary."""
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(path, overrides(executor, path.stem))
    return run_scenario(sc, out_dir, source=str(path)).summary


def load_golden(stem: str) -> dict[str, Any]:
    """The committed snapshot of ``stem``."""
    return json.loads(golden_path(stem).read_text(encoding="utf-8"))


def write_golden(stem: str, snap: dict[str, Any]) -> None:
    """Write ``snap`` as the committed snapshot of ``stem`` (stable, diff-friendly text)."""
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    golden_path(stem).write_text(dumps(snap) + "\n", encoding="utf-8")


def dumps(value: Any, indent: str = "") -> str:
    """JSON text for a person: objects one key a line, short lists and objects on one line."""
    flat = json.dumps(value, sort_keys=True)
    if len(flat) + len(indent) <= 100 or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(str(k))}: {dumps(v, inner)}" for k, v in sorted(value.items())]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if all(not isinstance(v, (dict, list)) for v in value):
        return flat  # a long list of numbers stays on one line
    return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + "\n" + indent + "]"


def check_against_golden(stem: str, run_dir: Path) -> list[Difference]:
    """The differences between the run in ``run_dir`` and the committed snapshot of ``stem``.

    Where a model-dependent decision came out differently (a soft difference), the run took
    another path from there: every difference is then reported, and only those beyond the
    learning tolerance in learning values fail.
    """
    diffs = compare(load_golden(stem), snapshot(run_dir), model_dependent(stem))
    if any(not d.fatal for d in diffs):
        diffs = [d if kind_of(d.path) == "learning" else Difference(d.path, d.want, d.got, d.rule, False) for d in diffs]
    return diffs


def kernels() -> str:
    """The CPU kernels this process computes with: torch's ATen capability and OpenBLAS's core."""
    import numpy  # noqa: F401  (loads numpy's OpenBLAS, so that threadpoolctl sees it)
    import torch
    from threadpoolctl import threadpool_info

    cores = sorted({str(i.get("architecture")) for i in threadpool_info() if i.get("internal_api") == "openblas"})
    return f"aten={torch.backends.cpu.get_cpu_capability()} openblas={','.join(cores) or 'none'}"


def _select(names: list[str]) -> list[Path]:
    if not names:
        return SCENARIOS
    by_stem = {p.stem: p for p in SCENARIOS}
    unknown = [n for n in names if n not in by_stem]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}; shipped: {', '.join(sorted(by_stem))}")
    return [by_stem[n] for n in names]


def main(argv: list[str]) -> int:
    """``--update [STEM ...]`` re-records snapshots; ``--check [STEM ...]`` compares and prints diffs."""
    mode = next((a for a in argv if a in ("--update", "--check")), None)
    names = [a for a in argv if not a.startswith("--")]
    if mode is None:
        print(__doc__)
        return 2
    failed = 0
    print(f"kernels: {kernels()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for path in _select(names):
            reason = skip_reason(path)
            if reason:
                print(f"skip {path.stem}: {reason}")
                continue
            run_dir = Path(tmp) / path.stem
            run_one(path, "local", run_dir)
            if mode == "--update":
                write_golden(path.stem, snapshot(run_dir))
                print(f"recorded {golden_path(path.stem).relative_to(ROOT)}")
                continue
            if not golden_path(path.stem).exists():
                print(f"{path.stem}: no snapshot; record it with python -m tests.golden --update {path.stem}")
                failed += 1
                continue
            diffs = check_against_golden(path.stem, run_dir)
            print(report(path.stem, diffs), flush=True)
            failed += any(d.fatal for d in diffs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
