"""The documentation: a strict Sphinx build, tutorials that run as written, a described reference.

* The site builds with ``sphinx-build -W --keep-going -n`` (a warning or a broken cross-reference
  fails), as ``make docs`` builds it; skipped where Sphinx is not installed (the ``docs`` extra).
* Every command block of a tutorial marked ``<!-- run -->`` runs, in order, in a scratch directory
  that sees the repository's scenarios, topologies, traces and examples, so the tutorials cannot rot.
  A line that is a plain ``hierfl`` command (words only, optionally piped into a shell) calls
  ``hierfl.cli.main`` in the test's process, which is what the console script calls, so the page
  pays no fresh interpreter and imports per command; every other line, and a block with a
  here-document, runs in ``bash``. The get-started page's first command, the one a newcomer types
  first, runs through the installed console script itself.
* Every scenario key and registered plug-in has a description: the generated reference would
  otherwise show an empty cell.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import hierfl_reference  # noqa: E402

HAS_SPHINX = all(importlib.util.find_spec(m) is not None for m in ("sphinx", "myst_parser"))
RUN_BLOCK = re.compile(r"<!-- run -->\s*\n```bash\n(.*?)```", re.S)
# a command block, and the block of what it prints (stdout and stderr) when one follows it
RUN_AND_OUTPUT = re.compile(r"<!-- run -->\s*\n```bash\n(.*?)```(?:\s*<!-- output -->\s*\n```text\n(.*?)```)?", re.S)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


def test_every_scenario_key_and_plugin_is_described():
    missing = hierfl_reference.undocumented()
    assert not missing, "no description (add Field(description=...) or a docstring):\n" + "\n".join(missing)


def test_reference_covers_every_registered_plugin(tmp_path):
    from hierfl.config.registry import Registry

    hierfl_reference.generate(tmp_path)
    for reg in Registry.instances():
        page = (tmp_path / "plugins" / f"{hierfl_reference._slug(reg.kind)}.md").read_text(encoding="utf-8")
        for name in reg.names():
            assert f"## `{name}`" in page, f"{reg.kind} {name!r} missing from its reference page"
    scenario = (tmp_path / "scenario.md").read_text(encoding="utf-8")
    for key in ("devices.count", "topology.edge_servers", "stop.virtual_time_s", "events[].at_s"):
        assert f"| {key} |" in scenario


@pytest.mark.skipif(not HAS_SPHINX, reason="sphinx and myst-parser are not installed (pip install -e '.[docs]')")
@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_docs_build_strict(tmp_path):
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")]
    res = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"sphinx-build failed:\n{res.stdout}\n{res.stderr}"
    assert (tmp_path / "html" / "index.html").is_file()
    assert (tmp_path / "html" / "reference" / "generated" / "outputs.html").is_file()


TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))
PAGES_THAT_RUN = [p for p in [DOCS / "get-started.md", *TUTORIALS] if p.stem != "index"]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# the words before a number that say which clause of docs/determinism.md it falls under
_WALL_CLOCK = re.compile(r"(wall|start-up)\s*$")
_LEARNED = re.compile(r"accuracy\s*$")
# a time to target is decided by accuracies: on another CPU the target may be crossed an evaluation
# earlier or later, or (where the accuracy stays within the tolerance of it) not at all
_TIME_TO_TARGET = re.compile(r"time to target (?:not reached|None|\d+(?:\.\d+)?s?)")


def output_differences(expected: str, actual: str) -> list[str]:
    """Where ``actual`` differs from a page's expected output, within the determinism contract.

    Line by line, blank lines ignored: the text between numbers must be equal; a number after
    ``wall`` or ``start-up`` is this machine's real time (anything); an accuracy may differ by 0.02;
    a time to target is decided by accuracies, so any is accepted; every other number (emulated
    times, rounds, counters, bytes, staleness) must be equal as printed.
    """
    want = [_TIME_TO_TARGET.sub("time to target …", ln.rstrip()) for ln in expected.strip().splitlines() if ln.strip()]
    got = [_TIME_TO_TARGET.sub("time to target …", ln.rstrip()) for ln in actual.strip().splitlines() if ln.strip()]
    if len(want) != len(got):
        return [f"{len(got)} lines printed, the page shows {len(want)}"]
    problems = []
    for w, g in zip(want, got):
        w_nums, g_nums = list(_NUMBER.finditer(w)), list(_NUMBER.finditer(g))
        if _NUMBER.sub("#", w) != _NUMBER.sub("#", g) or len(w_nums) != len(g_nums):
            problems.append(f"page: {w}\nrun:  {g}")
            continue
        for wm, gm in zip(w_nums, g_nums):
            before = w[:wm.start()]
            if _WALL_CLOCK.search(before):
                continue
            if _LEARNED.search(before):
                ok = abs(float(wm.group()) - float(gm.group())) <= 0.02
            else:
                ok = wm.group() == gm.group()
            if not ok:
                problems.append(f"page: {w}\nrun:  {g}\n({wm.group()} against {gm.group()} after {before[-30:]!r})")
    return problems


def test_output_comparison_follows_the_determinism_contract():
    line = "done: 14 rounds, virtual 30.0s, final accuracy 0.9260, time to target 10.0s, wall 5.7s (start-up 5.3s)"
    assert not output_differences(line, line.replace("5.7s", "61.0s").replace("0.9260", "0.9100"))
    assert not output_differences(line, line.replace("10.0s", "15.0s"))  # decided by accuracies
    assert not output_differences(line, line.replace("10.0s", "not reached"))
    assert output_differences(line, line.replace("0.9260", "0.8900"))     # beyond the learning tolerance
    assert output_differences(line, line.replace("30.0s", "30.1s"))       # emulated time: exact
    assert output_differences(line, line.replace("14 rounds", "15 rounds"))
    assert output_differences(line, line + "\nanother line")


def test_tutorials_have_run_blocks():
    with_blocks = [p.stem for p in TUTORIALS if RUN_BLOCK.search(p.read_text(encoding="utf-8"))]
    assert {"quickstart", "heterogeneity", "hierarchy"} <= set(with_blocks)


def test_every_command_of_a_page_shows_its_output():
    for page in PAGES_THAT_RUN:
        blocks = RUN_AND_OUTPUT.findall(page.read_text(encoding="utf-8"))
        assert blocks, f"{page.name}: no command runs"
        missing = [cmd.strip() for cmd, out in blocks if not out.strip()]
        assert not missing, f"{page.name}: commands without their expected output: {missing}"


# a hierfl command line of plain words (no quoting, redirection, variables or globs): main() takes it as is
_PLAIN_HIERFL = re.compile(r"hierfl(?:[ \t]+[^\s|&;<>()$`'\"\\*?]+)+")
# pages whose first hierfl command runs through the installed console script, as a reader types it
CONSOLE_SCRIPT_PAGES = {"get-started"}


def _bash(script: str, cwd: Path, stdin: str | None = None) -> tuple[int, str]:
    """``script`` in ``bash -euo pipefail``: its exit status, and its stdout and stderr together."""
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=_env(), input=stdin,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return res.returncode, res.stdout


def _hierfl_in_process(argv: list[str]) -> tuple[int, str]:
    """``hierfl ARGV`` as the console script runs it (``hierfl.cli.main``), in this process."""
    from hierfl.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            status = exc.code if isinstance(exc.code, int) else 1
    return status, printed.getvalue()


def run_block(block: str, cwd: Path, console_script: bool = False) -> tuple[int, str]:
    """A page's command block as ``bash -euo pipefail`` would run it: the first failing line stops it.

    Returns the exit status and everything printed. A line ``hierfl WORDS`` (or ``hierfl WORDS | SHELL``)
    runs ``hierfl.cli.main(WORDS)`` in this process (its output piped into ``SHELL`` in bash); any other
    line runs in bash. The lines share no shell state (no page sets a variable or changes directory;
    a block with a here-document runs in one bash whole). ``console_script``: the block's first hierfl
    line runs through the installed ``hierfl`` executable instead.
    """
    if "<<" in block or "\\\n" in block:
        return _bash(block, cwd)
    printed = []
    for line in (ln for ln in block.splitlines() if ln.strip()):
        head, bar, tail = line.partition("|")
        if _PLAIN_HIERFL.fullmatch(head.strip()) and not tail.startswith("|") and not console_script:
            status, out = _hierfl_in_process(shlex.split(head)[1:])
            if status == 0 and bar:
                status, out = _bash(tail, cwd, stdin=out)
        else:
            console_script = console_script and not _PLAIN_HIERFL.fullmatch(head.strip())
            status, out = _bash(line, cwd)
        printed.append(out)
        if status != 0:
            break
    return status, "".join(printed)


def test_run_block_runs_plain_hierfl_lines_in_process_and_the_rest_in_bash(tmp_path, monkeypatch):
    """The runner gives what bash gives: output in order, pipes, a failing line stopping the block."""
    monkeypatch.chdir(tmp_path)
    status, out = run_block("echo one\nhierfl --version\nhierfl --version | tr a-z A-Z\necho two\n", tmp_path)
    from hierfl import __version__

    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "one" and lines[-1] == "two" and len(lines) == 4
    assert __version__ in lines[1] and lines[2] == lines[1].upper()
    status, out = run_block("hierfl validate missing.yaml\necho never\n", tmp_path)
    assert status != 0 and "never" not in out and "missing.yaml" in out
    status, out = run_block("false\necho never\n", tmp_path)
    assert status == 1 and out == ""


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_THAT_RUN, ids=lambda p: p.stem)
def test_tutorial_commands_run(page, tmp_path, monkeypatch):
    for name in ("scenarios", "topologies", "traces", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)  # the in-process commands resolve the page's relative paths here
    monkeypatch.setenv("MPLBACKEND", "Agg")
    console_script = page.stem in CONSOLE_SCRIPT_PAGES
    for block, expected in RUN_AND_OUTPUT.findall(page.read_text(encoding="utf-8")):
        status, printed = run_block(block, tmp_path, console_script=console_script)
        console_script = False
        assert status == 0, f"{page.name}: this block failed:\n{block}\n{printed[-5000:]}"
        problems = output_differences(expected, printed)
        assert not problems, (f"{page.name}: this block printed other than the page shows:\n{block}\n"
                              + "\n".join(problems) + f"\n--- printed:\n{printed}")


def test_readme_scenario_is_the_quickstart_file():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## A scenario"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None, "README: no yaml block under '## A scenario'"
    assert block.group(1) == (ROOT / "scenarios" / "quickstart.yaml").read_text(encoding="utf-8"), \
        "README's scenario block differs from scenarios/quickstart.yaml: copy the file into it"


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert targets and not missing, missing


def test_provenance_tags_have_their_legend_where_they_appear(tmp_path):
    hierfl_reference.generate(tmp_path)
    generated = sorted(tmp_path.rglob("*.md"))
    tagged = [p for p in generated if re.search(r"\[[BD]\]", p.read_text(encoding="utf-8"))]
    names = {p.stem for p in tagged}
    assert {"protocol", "straggler-policy", "re-clustering-policy"} & names, names
    for page in tagged:
        assert hierfl_reference.TAG_LEGEND in page.read_text(encoding="utf-8"), f"{page.name}: no [B]/[D] legend"
    written = [p for p in DOCS.rglob("*.md") if "_build" not in p.parts and "generated" not in p.parts]
    for page in written:
        text = page.read_text(encoding="utf-8")
        if re.search(r"\[[BD]\]", text):
            assert "algorithms-provenance-tags" in text or page.name == "algorithms.md", \
                f"{page.relative_to(DOCS)}: [B]/[D] tags without their legend"
