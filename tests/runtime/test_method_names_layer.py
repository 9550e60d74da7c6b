"""Layer test: the infrastructure packages name no method (``driver``, ``runtime``, ``kernel``, ``assemble``,
``scenario``, ``env``).

A method's rules live in its own package (``hierfl/methods/``) and reach the infrastructure through the public
plug-in API (job methods, control variates, round rules, protocols, trainers, server tasks). :data:`REMAINING`
is a budget of lines that may still name a method in a module while a move is under way; it may only go down,
and a module not listed must name none.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "hierfl"
PACKAGES = ("driver", "runtime", "kernel", "assemble", "scenario", "env")
NAMES = re.compile(r"scaffold|feddc|distrans|fccl|fedftg|pfedla|bgfl|fedalign|fedmeta|rhfl|fedmd", re.IGNORECASE)

# lines still naming a method, per module (code, comments and docstrings); empty: the infrastructure names none
REMAINING: dict[str, int] = {}


def _counts() -> dict[str, int]:
    out: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            n = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if NAMES.search(line))
            if n:
                out[str(path.relative_to(ROOT))] = n
    return out


def test_infrastructure_names_no_new_method():
    counts = _counts()
    grown = {m: (n, REMAINING.get(m, 0)) for m, n in counts.items() if n > REMAINING.get(m, 0)}
    assert not grown, f"modules naming methods beyond their budget (lines, budget): {grown}"


def test_the_budget_follows_the_move():
    counts = _counts()
    stale = {m: (counts.get(m, 0), budget) for m, budget in REMAINING.items() if counts.get(m, 0) < budget}
    assert not stale, f"lower these budgets to what the modules now hold (lines, budget): {stale}"


def test_the_device_hosts_and_the_job_pipeline_are_method_free():
    """The modules the job methods emptied stay empty: jobs are run, costed and sized through the API."""
    for module in ("driver/jobs.py", "runtime/device_state.py"):
        text = (ROOT / module).read_text(encoding="utf-8")
        assert not NAMES.search(text), module
    assert not (ROOT / "runtime" / "feddc_jobs.py").exists() and not (ROOT / "runtime" / "distrans_jobs.py").exists()
