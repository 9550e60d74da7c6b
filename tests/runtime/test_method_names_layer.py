"""Layer test: the infrastructure names no method.

A method's rules live in its own package (``hierfl/methods/``) and reach the infrastructure through the public
plug-in API (job methods, control variates, round rules, protocols, trainers, server tasks). Two budgets count the
lines (code, comments, docstrings and strings) that still name a method, per module; each may only go down, and
a module not listed must name none:

* :data:`REMAINING` — the infrastructure packages proper (``driver``, ``runtime``, ``kernel``, ``assemble``,
  ``scenario``, ``env``): empty;
* :data:`ALL_REMAINING` — every module of ``hierfl/`` outside the method packages: the methods' math, torch
  work, server tasks, protocols, server optimizers and their policy plug-ins (staleness functions, groupings)
  live in their packages (``hierfl/protocols/`` keeps the protocols' framework), defaults named by a method
  come from :mod:`hierfl.methods`, allowed names in messages from the registries, and the shared modules cite a
  paper by its authors and year: empty.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "hierfl"
PACKAGES = ("driver", "runtime", "kernel", "assemble", "scenario", "env")
# every method of docs/explanation/algorithms.md (and the personalisation trainers), as a word of code or text:
# ``fedavg`` covers FedAvgM, LG-FedAvg and FedAvgMeta, ``fedftg`` the hierarchical FedFTG, ``d-?psgd`` AD-PSGD;
# the short names only where no letter touches them (``coop_age`` counts, ``cooperative`` does not); DP-FedAvg
# (``dp_fedavg``) is the privacy mechanism of McMahan et al. (ICLR 2018), a feature of its own, not the method
# (and DP-SGD, Abadi et al. CCS 2016, spelt ``DpSgd``/``dp_sgd`` and its ``learn.dpsgd.*`` seed streams, is the
# sample-level privacy mechanism, not the gossip method D-PSGD: that name is matched case-sensitively)
NAMES = re.compile(
    r"fedch|fedhisyn|ahfl|(?<!dp[-_])fedavg|hierfavg|fedasync|fedbuff|fedprox|scaffold(?!ing)|fedopt|fedadam|fedyogi|fedadagrad"
    r"|wscc|fedper|(?-i:d-?psgd|D-?PSGD)(?<!learn\.dpsgd)|(?<![a-z0-9])p2p(?![a-z0-9])|co-op(?![a-z])|(?<![a-z])coop(?![a-z])|feddc|bgfl|fedalign"
    r"|distrans|fedmd|fccl|rhfl|fedftg|pfnm|fedma|pfedla|fedmeta|fedat(?![a-z])|fedsgd",
    re.IGNORECASE)

# lines still naming a method, per module (code, comments and docstrings); empty: the infrastructure names none
REMAINING: dict[str, int] = {}

# the packages the whole-tree count leaves out: the methods' own homes (their protocols included)
OUTSIDE = ("methods",)
# lines still naming a method anywhere else in hierfl/, per module (path relative to hierfl/): empty, none does
ALL_REMAINING: dict[str, int] = {}


def _count(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if NAMES.search(line))


def _counts() -> dict[str, int]:
    out: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            n = _count(path)
            if n:
                out[str(path.relative_to(ROOT))] = n
    return out


def _all_counts() -> dict[str, int]:
    out: dict[str, int] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in OUTSIDE:
            continue
        n = _count(path)
        if n:
            out[rel.as_posix()] = n
    return out


@pytest.mark.parametrize("counts, budget", [(_counts, REMAINING), (_all_counts, ALL_REMAINING)],
                         ids=["infrastructure", "all-but-methods"])
def test_infrastructure_names_no_new_method(counts, budget):
    found = counts()
    grown = {m: (n, budget.get(m, 0)) for m, n in found.items() if n > budget.get(m, 0)}
    assert not grown, f"modules naming methods beyond their budget (lines, budget): {grown}"


@pytest.mark.parametrize("counts, budget", [(_counts, REMAINING), (_all_counts, ALL_REMAINING)],
                         ids=["infrastructure", "all-but-methods"])
def test_the_budget_follows_the_move(counts, budget):
    found = counts()
    stale = {m: (found.get(m, 0), n) for m, n in budget.items() if found.get(m, 0) < n}
    assert not stale, f"lower these budgets to what the modules now hold (lines, budget): {stale}"


def test_the_whole_tree_count_covers_the_infrastructure():
    """The infrastructure packages are inside the whole-tree count, and their budget there is no larger."""
    assert not set(PACKAGES) & set(OUTSIDE)
    assert all(ALL_REMAINING.get(m, 0) >= n for m, n in REMAINING.items())


def test_the_counter_sees_a_method_named_in_code_a_comment_or_a_string(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('x = 1  # FedDC\ny = "scaffold"\nz = 2\n"""pFedLA\'s weights"""\n', encoding="utf-8")
    assert _count(probe) == 3


def test_the_names_cover_every_registered_method_and_no_ordinary_word():
    """Every protocol, trainer and server optimizer a method registers is named by :data:`NAMES`; words
    that merely contain a name are not."""
    import hierfl.scenario.schema  # noqa: F401  (every shipped plug-in registers)
    from hierfl.learn.serveropt import SERVER_OPTIMIZERS
    from hierfl.learn.trainers import TRAINERS
    from hierfl.protocols import PROTOCOLS

    generic = {"sgd", "none"}  # the plain local trainers
    names = [n for reg in (PROTOCOLS, TRAINERS, SERVER_OPTIMIZERS) for n in reg.names() if n not in generic]
    assert len(names) >= 35
    assert [n for n in names if not NAMES.search(n)] == []
    for word in ("scaffolding", "cooperative", "co-operate", "p2pool", "hierfl", "fedaTUM"):
        assert not NAMES.search(word), word
    for text in ("coop_age", "AD-PSGD", "p2p", "FedAT's tiers", "LG-FedAvg"):
        assert NAMES.search(text), text


def test_methods_moved_out_of_the_core_and_the_learning_layer():
    """A method's math, torch work and server tasks live in its package (``math.py``, ``trainer.py``,
    ``server.py``), not in ``hierfl/core/``, ``hierfl/learn/`` or ``hierfl/learn/tasks/``."""
    left = [str(p.relative_to(ROOT)) for sub in ("core", "learn", "learn/tasks")
            for p in sorted((ROOT / sub).glob("*.py"))
            if NAMES.search(p.stem) or p.stem in ("matching", "matched", "sce", "align")]
    assert not left, left


def test_the_device_hosts_and_the_job_pipeline_are_method_free():
    """The modules the job methods emptied stay empty: jobs are run, costed and sized through the API."""
    for module in ("driver/jobs.py", "runtime/device_state.py"):
        text = (ROOT / module).read_text(encoding="utf-8")
        assert not NAMES.search(text), module
    assert not (ROOT / "runtime" / "feddc_jobs.py").exists() and not (ROOT / "runtime" / "distrans_jobs.py").exists()


# "about 400 lines" at most per infrastructure module: the flow network keeps its Flow record and the network
# that reads Flow's private fields in one module (the private-access rule of tests/interface/test_layers.py)
MODULE_LINES = 420


def test_no_infrastructure_module_is_long():
    """Every module of the infrastructure packages is at most about 400 lines (split by role, not grown)."""
    long = {str(p.relative_to(ROOT)): n for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert not long, f"infrastructure modules over {MODULE_LINES} lines: {long}"
