"""Tests for hierfl.viz: run-directory reading, convergence plots and timelines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierfl.viz import (
    SUPPORTED_FORMATS,
    RunReadError,
    eval_series,
    plot_runs,
    plot_timeline,
    read_metrics,
    read_summary,
    read_trace,
    run_labels,
    run_name,
    timeline_lanes,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Hand-written metrics: two evals around non-eval events, then a line cut off by a crash.
METRICS_TEXT = (
    '{"t": 0.0, "wall_s": 0.01, "event": "run_start"}\n'
    '{"t": 1.5, "wall_s": 0.2, "event": "edge_aggregate", "edge": 0}\n'
    '{"t": 2.0, "wall_s": 0.3, "event": "eval", "accuracy": 0.25, "loss": 2.1, "round": 1,'
    ' "bytes_cloud": 100, "cloud_aggregations": 1}\n'
    '{"t": 3.0, "wall_s": 0.4, "event": "cloud_aggregate", "round": 2}\n'
    '\n'
    '{"t": 4.5, "wall_s": 0.5, "event": "eval", "accuracy": 0.5, "loss": 1.4, "round": 2,'
    ' "bytes_cloud": 200, "cloud_aggregations": 2}\n'
    '{"t": 7.25, "wall_s": 0.6, "event": "eval", "accuracy": 0.75, "loss": 0.9, "round": 4,'
    ' "bytes_cloud": 400, "cloud_aggregations": 4}\n'
    '{"t": 8.0, "wall_s": 0.7, "event": "ev'
)

TRACE_EVENTS: list[dict[str, Any]] = [
    {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "devices"}},
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "cloud"}},
    {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "leaders"}},
    {"ph": "M", "name": "thread_name", "pid": 3, "tid": 10, "args": {"name": "device 10"}},
    {"ph": "M", "name": "thread_name", "pid": 3, "tid": 2, "args": {"name": "device 2"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0, "args": {"name": "cloud"}},
    {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "leader 1"}},
    {"ph": "M", "name": "thread_name", "pid": 2, "tid": 0, "args": {"name": "leader 0"}},
    {"ph": "M", "name": "thread_sort_index", "pid": 3, "tid": 2, "args": {"sort_index": 2}},
    {"ph": "X", "name": "train", "cat": "device", "ts": 500_000.0, "dur": 1_500_000.0,
     "pid": 3, "tid": 2, "args": {}},
    {"ph": "X", "name": "download", "cat": "net", "ts": 0.0, "dur": 500_000.0,
     "pid": 3, "tid": 2, "args": {}},
    {"ph": "X", "name": "upload", "cat": "net", "ts": 2_000_000.0, "dur": 250_000.0,
     "pid": 3, "tid": 10, "args": {}},
    {"ph": "X", "name": "aggregate", "cat": "edge", "ts": 2_250_000.0, "dur": 100_000.0,
     "pid": 2, "tid": 0, "args": {}},
    {"ph": "X", "name": "evaluate", "cat": "cloud", "ts": 3_000_000.0, "dur": 1_000_000.0,
     "pid": 1, "tid": 0, "args": {}},
    {"ph": "X", "name": "recluster", "cat": "cloud", "ts": 4_000_000.0, "dur": 20_000.0,
     "pid": 1, "tid": 0, "args": {}},
    {"ph": "i", "s": "t", "name": "dropout", "ts": 2_300_000.0, "pid": 3, "tid": 10},
    {"ph": "i", "s": "g", "name": "target reached", "ts": 3_500_000.0, "pid": 1, "tid": 0},
]


def crashed_trace_text(events: list[dict[str, Any]]) -> str:
    """The trace as the emulator writes it incrementally, cut off before the closing ']'."""
    return "[\n" + "".join(json.dumps(e) + ",\n" for e in events)


def write_run(
    run_dir: Path,
    name: str | None = "run-a",
    metrics: str = METRICS_TEXT,
    summary: dict[str, Any] | None = None,
    trace: str | None = None,
) -> Path:
    """Create a small run directory fixture."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if name is not None:
        (run_dir / "config.yaml").write_text(f"name: {name}\nseed: 7\n", encoding="utf-8")
    (run_dir / "metrics.jsonl").write_text(metrics, encoding="utf-8")
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    if trace is not None:
        (run_dir / "trace.json").write_text(trace, encoding="utf-8")
    return run_dir


# ---------------------------------------------------------------- runs.py


def test_eval_series_time_and_round_exact(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r")
    t, acc = eval_series(run)
    np.testing.assert_array_equal(t, [2.0, 4.5, 7.25])
    np.testing.assert_array_equal(acc, [0.25, 0.5, 0.75])
    rounds, loss = eval_series(run, metric="loss", x="round")
    np.testing.assert_array_equal(rounds, [1.0, 2.0, 4.0])
    np.testing.assert_array_equal(loss, [2.1, 1.4, 0.9])
    assert t.dtype == np.float64 and rounds.dtype == np.float64


def test_read_metrics_skips_truncated_final_line(tmp_path: Path) -> None:
    records = read_metrics(write_run(tmp_path / "r"))
    assert [r["event"] for r in records] == [
        "run_start", "edge_aggregate", "eval", "cloud_aggregate", "eval", "eval",
    ]
    assert records[-1]["t"] == 7.25


def test_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    lines = METRICS_TEXT.splitlines()
    lines[3] = '{"t": 3.0, "event": oops}'
    run = write_run(tmp_path / "r", metrics="\n".join(lines) + "\n")
    with pytest.raises(RunReadError, match=r"metrics\.jsonl:4: invalid JSON"):
        eval_series(run)
    with pytest.raises(RunReadError, match=r"metrics\.jsonl:4"):
        read_metrics(run)


def test_non_object_line_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", metrics='{"t": 0, "event": "eval"}\n[1, 2]\n{"t": 1}\n')
    with pytest.raises(RunReadError, match=r"metrics\.jsonl:2: expected a JSON object"):
        read_metrics(run)


def test_missing_metric_lists_available(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r")
    with pytest.raises(RunReadError, match="staleness") as info:
        eval_series(run, metric="staleness")
    message = str(info.value)
    assert "metrics.jsonl" in message
    for key in ("accuracy", "loss", "round", "bytes_cloud", "cloud_aggregations"):
        assert key in message


def test_no_eval_lines_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", metrics='{"t": 0.0, "wall_s": 0.0, "event": "run_start"}\n')
    with pytest.raises(RunReadError, match="no 'eval' lines"):
        eval_series(run)


def test_missing_metrics_file_and_bad_x(tmp_path: Path) -> None:
    with pytest.raises(RunReadError, match="metrics.jsonl: file not found"):
        eval_series(tmp_path)
    run = write_run(tmp_path / "r")
    with pytest.raises(ValueError, match="'time', 'round'"):
        eval_series(run, x="wall")


def test_run_name_and_summary(tmp_path: Path) -> None:
    named = write_run(tmp_path / "dir-a", name="baseline", summary={"final_accuracy": 0.75})
    unnamed = write_run(tmp_path / "dir-b", name=None)
    assert run_name(named) == "baseline"
    assert run_name(unnamed) == "dir-b"
    assert read_summary(named) == {"final_accuracy": 0.75}
    assert read_summary(unnamed) == {}


def test_run_labels_disambiguates_duplicates(tmp_path: Path) -> None:
    a = write_run(tmp_path / "x" / "seed1", name="fedavg")
    b = write_run(tmp_path / "y" / "seed1", name="fedavg")
    c = write_run(tmp_path / "z", name="hierfavg")
    assert run_labels([a, b, c]) == ["fedavg (x/seed1)", "fedavg (y/seed1)", "hierfavg"]
    d = write_run(tmp_path / "w", name="fedavg")
    assert run_labels([a, d]) == ["fedavg (seed1)", "fedavg (w)"]
    assert run_labels([c, c]) == ["hierfavg (z) #1", "hierfavg (z) #2"]


def test_read_trace_without_closing_bracket_and_trailing_comma(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", trace=crashed_trace_text(TRACE_EVENTS))
    assert read_trace(run) == TRACE_EVENTS


def test_read_trace_complete_and_cut_off_event(tmp_path: Path) -> None:
    complete = "[" + ",".join(json.dumps(e) for e in TRACE_EVENTS) + "]\n"
    run = write_run(tmp_path / "ok", trace=complete)
    assert read_trace(run) == TRACE_EVENTS
    cut = crashed_trace_text(TRACE_EVENTS[:3]) + '{"ph": "X", "name": "tra'
    run = write_run(tmp_path / "cut", trace=cut)
    assert read_trace(run) == TRACE_EVENTS[:3]


def test_read_trace_corrupt_middle_is_an_error(tmp_path: Path) -> None:
    text = crashed_trace_text(TRACE_EVENTS[:2]) + '{"ph": oops},\n' + json.dumps(TRACE_EVENTS[2])
    run = write_run(tmp_path / "r", trace=text)
    with pytest.raises(RunReadError, match=r"trace\.json:4: invalid trace event"):
        read_trace(run)


# ---------------------------------------------------------------- timeline.py


def test_timeline_lanes_order_and_seconds() -> None:
    lanes = timeline_lanes(TRACE_EVENTS)
    assert [label for label, _ in lanes] == [
        "cloud", "leader 0", "leader 1", "device 2", "device 10",
    ]
    spans = dict(lanes)
    assert spans["cloud"] == [(3.0, 1.0, "evaluate"), (4.0, 0.02, "recluster")]
    assert spans["leader 0"] == [(2.25, 0.1, "aggregate")]
    assert spans["leader 1"] == []
    assert spans["device 2"] == [(0.0, 0.5, "download"), (0.5, 1.5, "train")]
    assert spans["device 10"] == [(2.0, 0.25, "upload")]


def test_timeline_lanes_rely_on_process_names_not_pids() -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "devices"}},
        {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "cloud"}},
        {"ph": "X", "name": "train", "ts": 0, "dur": 1e6, "pid": 1, "tid": 4},
        {"ph": "X", "name": "aggregate", "ts": 1e6, "dur": 2e6, "pid": 9, "tid": 0},
    ]
    assert timeline_lanes(events) == [
        ("cloud 0", [(1.0, 2.0, "aggregate")]),
        ("devices 4", [(0.0, 1.0, "train")]),
    ]


def test_timeline_lanes_bad_span_names_event() -> None:
    with pytest.raises(ValueError, match=r"#0 .*'dur'"):
        timeline_lanes([{"ph": "X", "name": "train", "ts": 0, "pid": 3, "tid": 1}])


# ---------------------------------------------------------------- plotting


def test_plot_runs_png_and_svg_with_duplicate_names(tmp_path: Path) -> None:
    summary = {"final_accuracy": 0.75, "time_to_target_s": 4.5, "target_accuracy": 0.5,
               "virtual_time_s": 8.0}
    a = write_run(tmp_path / "a", name="same", summary=summary)
    b = write_run(tmp_path / "b", name="same", summary={"time_to_target_s": None})
    png = plot_runs([a, b], tmp_path / "plots" / "acc.png")
    assert png == tmp_path / "plots" / "acc.png"
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 1000
    svg = plot_runs([a, b], tmp_path / "acc.svg", x="round", metric="loss", title="loss")
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text
    assert run_labels([a, b]) == ["same (a)", "same (b)"]


def test_plot_runs_unsupported_format(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r")
    with pytest.raises(ValueError, match="png, svg, pdf"):
        plot_runs([run], tmp_path / "acc.jpg")
    with pytest.raises(ValueError, match="png, svg, pdf"):
        plot_runs([run], tmp_path / "acc")
    assert not (tmp_path / "acc.jpg").exists()
    assert SUPPORTED_FORMATS == ("png", "svg", "pdf")


def test_plot_timeline_png(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", trace=crashed_trace_text(TRACE_EVENTS))
    out = plot_timeline(run, tmp_path / "t" / "timeline.png", t_max=3.0)
    assert out.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="png, svg, pdf"):
        plot_timeline(run, tmp_path / "timeline.gif")


def test_plot_timeline_more_devices_than_max(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "cloud"}},
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "devices"}},
    ]
    for tid in range(12):
        events.append({"ph": "M", "name": "thread_name", "pid": 3, "tid": tid,
                       "args": {"name": f"device {tid}"}})
        events.append({"ph": "X", "name": "train", "cat": "d", "ts": tid * 1e5, "dur": 1e6,
                       "pid": 3, "tid": tid, "args": {}})
    run = write_run(tmp_path / "r", trace=json.dumps(events))
    out = plot_timeline(run, tmp_path / "many.svg", max_devices=5)
    text = out.read_text(encoding="utf-8")
    assert "7 omitted" in text  # title text is kept as <text>/comments in the SVG


def _edge_run(tmp_path: Path, stop_s: float | None) -> Path:
    """A run of 4 devices under 2 edge servers (devices.csv), whose last span ends at 5 s."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "cloud"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "edge servers"}},
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "devices"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0, "args": {"name": "cloud"}},
    ]
    for e in (0, 1):
        events.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": e, "args": {"name": f"edge {e}"}})
        events.append({"ph": "i", "s": "t", "name": "aggregate", "ts": 2e6, "pid": 2, "tid": e})
    for d in range(4):
        events.append({"ph": "M", "name": "thread_name", "pid": 3, "tid": d, "args": {"name": f"device {d}"}})
        events.append({"ph": "X", "name": "train", "ts": 1e6 * d, "dur": 2e6, "pid": 3, "tid": d, "args": {}})
    run = write_run(tmp_path / "r", summary=None if stop_s is None else {"virtual_time_s": stop_s},
                    trace=json.dumps(events))
    rows = ["device,edge", "0,0", "1,1", "2,0", "3,1"]
    (run / "devices.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return run


def test_timeline_ends_at_the_stop_and_cuts_the_bars_there(tmp_path: Path) -> None:
    from hierfl.viz.plot import X_LABELS, new_figure
    from hierfl.viz.timeline import _build_lanes, draw_timeline, grouped_rows, run_end

    run = _edge_run(tmp_path, stop_s=3.0)
    lanes, instants = _build_lanes(read_trace(run))
    assert run_end(run, lanes, instants) == 3.0  # summary.json's stop, not the last span's end (5 s)
    assert run_end(_edge_run(tmp_path / "going", stop_s=None), lanes, instants) == 5.0
    fig = new_figure(8, 4)
    draw_timeline(fig, grouped_rows(lanes, [("edge 0", [0, 2]), ("edge 1", [1, 3])], 48), instants, 0.0, 3.0, "t")
    ax = fig.axes[0]
    assert ax.get_xlim() == (0.0, 3.0) and ax.get_xlabel() == X_LABELS["time"]
    right = max(p.vertices[:, 0].max() for c in ax.collections for p in c.get_paths())
    assert right <= 3.0 + 1e-12  # device 2's bar (2 s to 4 s) and device 3's (3 s to 5 s) end at the stop
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "train" in legend and any(t.startswith("point event") and "aggregate" in t for t in legend)
    assert "busy" in ax.get_legend().get_title().get_text()
    svg = plot_timeline(run, tmp_path / "t.svg").read_text(encoding="utf-8")
    assert "0–3 s" in svg


def test_timeline_groups_devices_under_their_edge_as_the_report_does(tmp_path: Path) -> None:
    from hierfl.report import run_report_html
    from hierfl.viz.groups import device_groups, read_clusters, read_devices
    from hierfl.viz.timeline import MAX_DEVICE_LANES, _build_lanes, grouped_rows

    run = _edge_run(tmp_path, stop_s=3.0)
    groups, _ = device_groups(read_clusters(run), read_devices(run))
    assert groups == [("edge 0", [0, 2]), ("edge 1", [1, 3])]
    lanes, _ = _build_lanes(read_trace(run))
    tl = grouped_rows(lanes, groups, max_devices=3)
    labels = [label.strip() for label, _, _ in tl.rows]
    assert labels == ["cloud", "edge 0  [2 devices]", "device 0", "device 2", "edge 1  [2 devices]", "device 1",
                      "… 1 more"]
    assert (tl.drawn, tl.total) == (3, 4)
    svg = plot_timeline(run, tmp_path / "t.svg", max_devices=3).read_text(encoding="utf-8")
    assert "3 of 4 devices shown, 1 omitted" in svg
    # one default for both pictures
    import inspect

    from hierfl.cli import MAX_DEVICE_LANES as CLI_DEFAULT

    assert CLI_DEFAULT == MAX_DEVICE_LANES == inspect.signature(plot_timeline).parameters["max_devices"].default
    assert inspect.signature(run_report_html).parameters["max_devices"].default == MAX_DEVICE_LANES


def test_report_shows_queues_as_a_table(tmp_path: Path) -> None:
    from hierfl.report import run_report_html

    queues = {"edge": {"mean": 1.23456789012, "max": 4,
                       "by_entity": {"0": {"mean": 0.5, "max": 2}, "1": {"mean": 0.73456789, "max": 3}}}}
    run = write_run(tmp_path / "r", summary={"status": "completed", "queues": queues})
    page = run_report_html(run, run / "report.html")
    table = page[page.index('id="queues-table"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 1 + 3  # the header, the tier, its two servers
    assert "edge 1" in table and ">1.235<" in table and ">0.7346<" in table
    assert "by_entity" not in page and "1.23456789012" not in table.replace('data-v="1.23456789012"', "")


def test_report_rounds_the_other_summary_sections(tmp_path: Path) -> None:
    from hierfl.report import run_report_html

    energy = {"total_j": 1234.56789012345, "per_device": {"mean_j": 0.000123456789}}
    run = write_run(tmp_path / "r", summary={"status": "completed", "energy": energy})
    page = run_report_html(run, run / "report.html")
    assert "1235" in page and "0.0001235" in page and "1234.56789012345" not in page


def test_reading_runs_and_sweeps_does_not_import_matplotlib_until_a_plot_is_asked_for() -> None:
    import subprocess
    import sys

    code = ("import sys; import hierfl.viz, hierfl.sweep.aggregate; a = 'matplotlib' in sys.modules; "
            "from hierfl.viz import plot_runs; print(a, 'matplotlib' in sys.modules, callable(plot_runs))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "True"]
    import hierfl.viz

    with pytest.raises(AttributeError, match="no attribute 'plot_nothing'"):
        hierfl.viz.plot_nothing  # noqa: B018
