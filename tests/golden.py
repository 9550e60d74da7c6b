"""Golden outputs of every shipped scenario: digests recorded before a structural change, checked after.

Each shipped scenario runs with short limits (``GOLDEN_OVERRIDES``) and the digests of its
contract outputs are compared with ``tests/golden/digests.json``: ``metrics.jsonl`` without its
wall-clock and executor fields, the final model's bits, ``trace.json``, ``devices.csv`` and
``clusters.jsonl``. The same digests must come out of the local and the Ray executor.

Record them (only when outputs are meant to change, and say why in the commit)::

    .venv/bin/python -m tests.golden --update
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
DIGESTS = ROOT / "tests" / "golden" / "digests.json"

# short runs: two cloud aggregations (or the scenario's own time budget, if that comes first)
GOLDEN_OVERRIDES = ["stop.rounds=2", "stop.target_accuracy=null"]
# fields of metrics.jsonl lines that depend on the machine or the executor, not on the emulation
VOLATILE = ("wall_s", "startup_s", "executor", "workers")


def overrides(path: Path, executor: str) -> list[str]:
    """The ``--set`` list of a golden run of ``path`` on ``executor``."""
    del path  # the same limits for every scenario (events stay inside each scenario's own time budget)
    return [*GOLDEN_OVERRIDES, f"runtime.executor={executor}", "runtime.workers=2"]


def skip_reason(path: Path) -> str | None:
    """Why ``path`` cannot run here (dataset files absent), or None."""
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(path, ["runtime.executor=local"])
    root = getattr(sc.data.dataset, "root", None)
    if root is not None and not Path(root).exists():
        return f"dataset files not in {root}"
    return None


def digest_run(run_dir: Path) -> dict[str, str]:
    """sha256 of each contract output of a finished run (metrics without volatile fields)."""
    out: dict[str, str] = {}
    lines = []
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        lines.append(json.dumps({k: v for k, v in rec.items() if k not in VOLATILE}, sort_keys=True))
    out["metrics"] = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    import numpy as np

    out["model"] = hashlib.sha256(np.load(run_dir / "final_model.npy").tobytes()).hexdigest()
    for name in ("trace.json", "devices.csv", "clusters.jsonl"):
        out[name] = hashlib.sha256((run_dir / name).read_bytes()).hexdigest()
    return out


def run_one(path: Path, executor: str, out_dir: Path) -> dict[str, str]:
    """Run ``path`` with the golden limits on ``executor`` and digest its outputs."""
    from hierfl.scenario.loader import load_scenario
    from hierfl.driver import run_scenario

    sc = load_scenario(path, overrides(path, executor))
    summary = run_scenario(sc, out_dir, source=str(path)).summary
    assert summary["status"] == "completed", summary
    return digest_run(out_dir)


def load_digests() -> dict[str, Any]:
    """The recorded digests, by scenario stem."""
    return json.loads(DIGESTS.read_text(encoding="utf-8"))


def main(argv: list[str]) -> int:
    """``--update``: re-record every digest with the local executor."""
    if "--update" not in argv:
        print(__doc__)
        return 2
    digests: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in SCENARIOS:
            reason = skip_reason(path)
            if reason:
                print(f"skip {path.stem}: {reason}")
                continue
            digests[path.stem] = run_one(path, "local", Path(tmp) / path.stem)
            print(f"recorded {path.stem}")
    DIGESTS.parent.mkdir(parents=True, exist_ok=True)
    DIGESTS.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
