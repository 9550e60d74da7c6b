"""hierfl report: one self-contained, well-formed HTML page of a run or a sweep directory, holding the
run's numbers and hierarchy; bad input exits 2; the page loads in headless Chromium without console errors."""

from __future__ import annotations

import copy
import csv
import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

import hierfl
from hierfl.cli import main
from tests.conftest import TINY

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Page(HTMLParser):
    """Checks nesting (every element closed, in order) and gathers what the tests look at."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: set[str] = set()
        self.groups: dict[str, list[int]] = {}
        self.table_rows: dict[str, list[str]] = {}
        self.text: dict[str, str] = {}  # id -> text of elements with an id (pre, ...)
        self._group: str | None = None
        self._table: str | None = None
        self._capture: list[tuple[str, int, list[str]]] = []
        self.doctype = False

    def handle_decl(self, decl: str) -> None:
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "div" and "data-group" in a:
            self._group = str(a["data-group"])
            self.groups[self._group] = []
        if tag == "span" and "data-device" in a and self._group is not None:
            self.groups[self._group].append(int(str(a["data-device"])))
        if tag == "table":
            self._table = str(a.get("id"))
            self.table_rows[self._table] = []
        if tag == "tr" and self._table is not None and len(a) > 0:
            self.table_rows[self._table].append(next(iter(a.values())) or "")
        if tag in VOID:
            return
        self.stack.append(tag)
        if a.get("id") and tag == "pre":
            self._capture.append((str(a["id"]), len(self.stack), []))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))  # <path .../> in inline SVG

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        if self._capture and self._capture[-1][1] == len(self.stack):
            key, _, parts = self._capture.pop()
            self.text[key] = "".join(parts)
        self.stack.pop()
        if tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        for _, _, parts in self._capture:
            parts.append(data)


def _parse(path: Path) -> tuple[_Page, str]:
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    page.close()
    assert page.doctype, "no <!DOCTYPE html>"
    assert not page.errors, page.errors[:5]
    assert page.stack == [], f"unclosed: {page.stack}"
    names = [t for t, _ in page.tags]
    assert names[:1] == ["html"] and names.count("html") == 1 and names.count("body") == 1
    assert names.count("head") == 1 and names.count("title") == 1 and "style" in names
    return page, text


def _self_contained(page: _Page, text: str) -> None:
    external = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)
    for tag, attrs in page.tags:
        for key in ("src", "href", "data", "poster", "srcset", "xlink:href"):
            value = attrs.get(key)
            if value is None or not external.match(value):
                continue
            # the one network address allowed is a link a person clicks: ui.perfetto.dev
            assert tag == "a" and key == "href" and value.startswith("https://ui.perfetto.dev"), (tag, key, value)
    assert not re.search(r"""(src|<link[^>]*href)\s*=\s*["']?https?:""", text, re.IGNORECASE)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text, re.IGNORECASE) and "@import" not in text
    assert all(attrs.get("src", "").startswith("data:image/") for tag, attrs in page.tags if tag == "img")
    assert not any(tag in ("link", "iframe", "object", "embed") for tag, _ in page.tags)
    assert not any(tag == "script" and "src" in attrs for tag, attrs in page.tags)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "run"
    scenario = {**copy.deepcopy(TINY), "devices": {**TINY["devices"], "count": 6},
                "topology": {"edge_servers": 2}, "protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 2},
                "training": {"batch_size": 10, "lr": 0.1}, "evaluation": {"every_s": 1.0, "target_accuracy": 0.5}}
    hierfl.run(scenario, out=out)
    return out


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # a sweep directory made by hand (the manifest plus ordinary runs, as hierfl sweep leaves it): 2 points x 2 seeds
    from hierfl.sweep.spec import SweepSpec, expand

    root = tmp_path_factory.mktemp("report_sweep")
    (root / "base.yaml").write_text(yaml.safe_dump(TINY), encoding="utf-8")
    spec = SweepSpec.model_validate({"name": "tiny_sweep", "scenario": "base.yaml", "seeds": [1, 2],
                                     "grid": {"protocol.fraction": [0.5, 1.0]}, "target": 0.5})
    trials, _ = expand(spec, root / "base.yaml")
    out = root / "sw"
    for t in trials:
        hierfl.run(root / "base.yaml", overrides=t.overrides, seed=t.seed, out=out / "runs" / t.id)
    manifest = {"name": spec.name, "spec": spec.model_dump(mode="json"), "trials": [t.as_dict() for t in trials]}
    (out / "sweep.json").write_text(json.dumps(manifest), encoding="utf-8")
    return out


def test_run_report_is_self_contained_html_with_the_run_and_its_hierarchy(run_dir, capsys):
    assert main(["report", str(run_dir)]) == 0
    path = run_dir / "report.html"
    assert capsys.readouterr().out.strip() == str(path)
    page, text = _parse(path)
    _self_contained(page, text)
    assert {"summary", "curves", "hierarchy", "timeline", "devices", "trace", "scenario"} <= page.ids
    summary = json.loads((run_dir / "summary.json").read_text())
    cards = dict(re.findall(r'<div class="k">([^<]*)</div><div class="v">([^<]*)</div>', text))
    assert cards["final accuracy"] == f"{summary['final_accuracy']:.4g}"
    assert cards["cloud rounds"] == str(summary["rounds"]) and cards["devices"] == "6"
    assert cards["status"] == "completed"
    # the hierarchy: every device under the edge server clusters.jsonl put it in
    first = json.loads((run_dir / "clusters.jsonl").read_text().splitlines()[0])
    assert page.groups == {leader: sorted(m) for leader, m in zip(first["leaders"], first["members"])}
    assert sorted(d for m in page.groups.values() for d in m) == list(range(6))
    # the device table: one row per device, with its group and what the trace says it did
    assert sorted(int(x) for x in page.table_rows["device-table"]) == list(range(6))
    devices = list(csv.DictReader((run_dir / "devices.csv").open()))
    for d in devices:
        row = re.search(rf'<tr data-device="{d["device"]}">(.*?)</tr>', text).group(1)
        assert f">edge {d['edge']}<" in row
    assert "train jobs" in text and "bytes up" in text
    # four charts (accuracy, loss x time, round) as inline SVG; the timeline as an inline PNG
    assert text.count('<figure class="chart"') == 4 and text.count("<svg") == 4
    assert "All 6 devices drawn" in text
    # the scenario as it ran, escaped; the trace by a relative link and a word on ui.perfetto.dev
    assert page.text["config"] == (run_dir / "config.yaml").read_text()
    assert ('<a href="trace.json">' in text) and "ui.perfetto.dev" in text


def test_run_report_elsewhere_links_the_trace_relatively_and_bounds_the_timeline(run_dir, tmp_path, capsys):
    out = tmp_path / "sub" / "page.html"
    assert main(["report", str(run_dir), "-o", str(out), "--max-devices", "2"]) == 0
    _, text = _parse(out)
    href = re.search(r'<a href="([^"]+)">[^<]*trace\.json</a>', text).group(1)
    assert not href.startswith(("/", "http")) and (out.parent / href).resolve() == (run_dir / "trace.json").resolve()
    assert "2 of 6 devices drawn" in text
    capsys.readouterr()


def test_sweep_report_has_bands_groups_and_every_trial(sweep_dir, capsys):
    out = sweep_dir / "report.html"
    assert main(["report", str(sweep_dir), "-o", str(out)]) == 0
    page, text = _parse(out)
    _self_contained(page, text)
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    ids = [t["id"] for t in manifest["trials"]]
    assert page.table_rows["trial-table"] == ids
    assert "protocol.fraction=0.5" in text and "protocol.fraction=1" in text
    bands = [int(b) for b in re.findall(r'<figure class="chart" data-bands="(\d+)"', text)]
    assert len(bands) == 4 and all(b == 2 for b in bands)  # two groups of two seeds: a band each, every chart
    assert "mean over seeds, band from min to max" in text
    for t in ids:  # each trial's trace, linked relatively
        assert f'href="runs/{t}/trace.json"' in html.unescape(text)
    assert main(["report", str(sweep_dir), "-o", str(out), "--group-by", "seed"]) == 0
    assert "by seed" in out.read_text()
    capsys.readouterr()


def test_bad_input_exits_2_with_a_clear_message(tmp_path, run_dir, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "not a run directory (no metrics.jsonl) nor a sweep directory (no sweep.json)" in err
    assert "Traceback" not in err
    (tmp_path / "file.txt").write_text("x")
    assert main(["report", str(tmp_path / "file.txt")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["report", str(run_dir), "-o", str(tmp_path / "x.html"), "--group-by", "seed"]) == 2
    assert "--group-by takes a sweep directory" in capsys.readouterr().err


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


_NO_BROWSER = ("no chromium on PATH: install it (Debian: apt-get install chromium) to load the report in a "
               "headless browser")


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None and not os.environ.get("HIERFL_BROWSER_REQUIRED"), reason=_NO_BROWSER)
def test_report_loads_in_headless_chromium_without_console_errors(run_dir, sweep_dir, tmp_path):
    # CI (.ci/run) sets HIERFL_BROWSER_REQUIRED: there a missing browser fails the suite instead of skipping this test
    assert _chromium() is not None, _NO_BROWSER
    for d in (run_dir, sweep_dir):
        page = d / "report.html"
        if not page.exists():
            assert main(["report", str(d)]) == 0
        proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                               "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.resolve().as_uri()],
                              check=False, capture_output=True, text=True, timeout=120)
        console = [line for line in proc.stderr.splitlines() if ":CONSOLE(" in line or ":CONSOLE:" in line
                   or "Uncaught" in line]
        assert not console, "\n".join(console)
        # the page's script ran to its end (it marks <html data-js="ok">) and the DOM came back whole
        assert 'data-js="ok"' in proc.stdout and "</html>" in proc.stdout, proc.stderr[-2000:]
