"""How far each golden scenario's learned outputs move under this process's CPU kernels.

A golden run ends after two cloud rounds, and many end near chance accuracy. Near chance is where
a model is most fragile: its logits are close together, and a last-bit difference between two
machines' kernels can flip the predicted class of many test samples. This script measures that
directly instead of guessing: it runs each golden scenario with the golden limits, in this process,
and compares the learned values with the committed snapshot (``tests/golden/*.json``):

* ``max |d acc|``: the largest absolute difference of any accuracy in the snapshot (the final one and
  every evaluation line kept);
* ``max rel d``: the largest relative difference of any loss or of the model's L2 norm.

Run it under other kernels to see what another machine would get, e.g.::

    ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Sandybridge \\
        .venv/bin/python analysis/golden_sensitivity.py            # every golden scenario
    .venv/bin/python analysis/golden_sensitivity.py fedasync ahfl  # some

The golden test's tolerance is ``LEARN_ABS`` (0.02) on accuracies; a scenario whose ``max |d acc|``
is a sizeable share of it is ill-conditioned and should be made well-conditioned (as ``digits_cnn`` and
``gpu_cifar10_fedavg`` were), never given a looser tolerance. Measurements: ``docs/determinism.md``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.golden import LEARN_ABS, SCENARIOS, kernels, load_golden, run_one, skip_reason, snapshot  # noqa: E402


def learned(snap: Any, path: str = "") -> dict[str, float]:
    """Every accuracy, loss and norm in a snapshot, by its path."""
    out: dict[str, float] = {}
    if isinstance(snap, dict):
        for key, value in snap.items():
            out.update(learned(value, f"{path}.{key}"))
    elif isinstance(snap, list):
        for i, value in enumerate(snap):
            out.update(learned(value, f"{path}[{i}]"))
    elif isinstance(snap, (int, float)) and not isinstance(snap, bool) and any(
            word in path for word in ("accuracy", "loss", "norm")):
        out[path] = float(snap)
    return out


def deltas(stem: str, path: Path) -> tuple[float | None, float, float]:
    """(stored final accuracy, max |d accuracy|, max relative d of losses and norms) for one scenario."""
    with tempfile.TemporaryDirectory() as tmp:
        run_one(path, "local", Path(tmp) / "run")
        got = learned(snapshot(Path(tmp) / "run"))
    stored = load_golden(stem)
    want = learned(stored)
    common = [k for k in want if k in got]
    acc = max((abs(want[k] - got[k]) for k in common if "accuracy" in k), default=0.0)
    rel = max((abs(want[k] - got[k]) / max(abs(want[k]), 1e-12) for k in common if "accuracy" not in k), default=0.0)
    return stored["summary"].get("final_accuracy"), acc, rel


def main(argv: list[str]) -> int:
    from hierfl.config.plugins import isolated
    from hierfl.scenario.loader import load_scenario

    by_stem = {p.stem: p for p in SCENARIOS}
    unknown = [s for s in argv if s not in by_stem]
    if unknown:
        print(f"unknown scenarios: {unknown}", file=sys.stderr)
        return 2
    load_scenario(by_stem["quickstart"])  # registries filled once, outside the isolated scopes below
    print(kernels())
    print(f"{'scenario':28s} {'accuracy':>9s} {'max |d acc|':>12s} {'max rel d':>10s}   (tolerance: {LEARN_ABS} on accuracy)")
    worst = 0.0
    for stem in argv or sorted(by_stem):
        if skip_reason(by_stem[stem]):
            continue
        with isolated():
            final, acc, rel = deltas(stem, by_stem[stem])
        worst = max(worst, acc)
        shown = "-" if final is None else f"{final:.4f}"
        print(f"{stem:28s} {shown:>9s} {acc:12.4f} {rel:10.2e}", flush=True)
    print(f"largest accuracy difference: {worst:.4f} ({worst / LEARN_ABS:.0%} of the tolerance)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
