"""``hierfl report``: one self-contained HTML page of a run directory or a sweep directory.

Everything is inlined (CSS, a few lines of JavaScript that sort the tables, the charts as SVG, the
timeline as a base64 PNG): the file opens from disk in any browser, with no server and no network.

A run's page: the summary, accuracy and loss against emulated time and against cloud rounds, the
hierarchy (every device under its edge server or cluster, from ``clusters.jsonl`` or the ``edge``
column of ``devices.csv``), a timeline of the cloud, the leaders and the devices grouped under
their leader (at most ``max_devices`` device lanes, the page says how many were left out), a
per-device table (``devices.csv`` joined with what ``trace.json`` and ``metrics.jsonl`` say about
each device: busy seconds, bytes, updates and their staleness), the scenario as it ran
(``config.yaml``) and a relative link to ``trace.json`` for https://ui.perfetto.dev.

A sweep's page: a table per group of trials (mean ± 95 % CI over seeds, as ``hierfl table``), the
curves of every group as the mean over its seeds with a min–max band, one row per trial, and the
sweep file.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hierfl.viz.groups import device_groups, read_clusters, read_devices
from hierfl.viz.runs import (
    RunReadError,
    eval_series,
    read_metrics,
    read_summary,
    read_trace,
)
from hierfl.viz.timeline import MAX_DEVICE_LANES

__all__ = ["device_groups", "run_report_html", "sweep_report_html", "write_report"]

_CSS = """
:root{--fg:#1d2430;--muted:#5b6576;--line:#d9dee6;--bg:#fff;--soft:#f4f6f9;--accent:#2b6cb0}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:18px 28px 10px;border-bottom:1px solid var(--line);background:var(--soft)}
header h1{margin:0 0 4px;font-size:22px}
header p{margin:0;color:var(--muted)}
nav{margin-top:8px}nav a{margin-right:14px;color:var(--accent);text-decoration:none;font-size:14px}
main{padding:8px 28px 40px;max-width:1400px}
section{margin-top:26px}
h2{font-size:18px;border-bottom:1px solid var(--line);padding-bottom:4px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 12px;min-width:140px;background:var(--bg)}
.card .k{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.card .v{font-size:18px;font-weight:600}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:12px}
.charts figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:6px}
.charts svg{width:100%;height:auto}
figcaption,.note{color:var(--muted);font-size:13px}
.timeline img{max-width:100%;border:1px solid var(--line);border-radius:6px}
table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:right;white-space:nowrap}
th{background:var(--soft);position:sticky;top:0;cursor:pointer;user-select:none}
th.sorted-asc::after{content:" \\25B2"}th.sorted-desc::after{content:" \\25BC"}
td.t,th.t{text-align:left}
.scroll{max-height:560px;overflow:auto;border:1px solid var(--line);border-radius:6px;display:inline-block;max-width:100%}
.groups{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:10px}
.group{border:1px solid var(--line);border-radius:6px;padding:6px 10px}
.group h3{margin:0 0 4px;font-size:14px}
.dev{display:inline-block;min-width:2.6em;margin:1px;padding:0 3px;border-radius:3px;background:var(--soft);
     font-size:12px;text-align:center;font-variant-numeric:tabular-nums}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;font-size:12.5px}
"""

# sorts a table by the clicked header: numbers numerically (data-v holds the raw value), text as text
_JS = """
(function(){
  function key(td){var v=td.getAttribute('data-v');if(v===null)v=td.textContent;var n=parseFloat(v);
    return (v!==''&&isFinite(n))?[0,n,'']:[1,0,v.toLowerCase()];}
  function cmp(a,b){for(var i=0;i<3;i++){if(a[i]<b[i])return -1;if(a[i]>b[i])return 1;}return 0;}
  document.querySelectorAll('table.sortable').forEach(function(table){
    var heads=table.querySelectorAll('thead th');
    heads.forEach(function(th,col){th.addEventListener('click',function(){
      var asc=!th.classList.contains('sorted-asc');
      heads.forEach(function(h){h.classList.remove('sorted-asc','sorted-desc');});
      th.classList.add(asc?'sorted-asc':'sorted-desc');
      var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(r1,r2){var c=cmp(key(r1.cells[col]),key(r2.cells[col]));return asc?c:-c;});
      rows.forEach(function(r){body.appendChild(r);});
    });});
  });
  document.documentElement.setAttribute('data-js','ok');
})();
"""

_MAX_TABLE_ROWS = 5000
_esc = html.escape


# -- small formatting helpers ---------------------------------------------------------------------------

def _fmt(value: Any) -> str:
    """A cell's text: integers with separators, floats to 4 significant digits, None as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:.4g}"
    return str(value)


def _table(columns: list[str], rows: Iterable[dict[str, Any]], table_id: str, text_cols: Iterable[str] = (),
           raw: dict[str, str] | None = None, row_attr: str | None = None) -> str:
    """A sortable table; ``raw`` maps a column to an HTML template taking ``{v}`` (links)."""
    text_cols = set(text_cols)
    head = "".join(f'<th class="t">{_esc(c)}</th>' if c in text_cols else f"<th>{_esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c)
            cls = ' class="t"' if c in text_cols else ""
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            data = f' data-v="{float(v)!r}"' if number else ""
            if raw and c in raw and v not in (None, ""):
                cells.append(f"<td{cls}>{raw[c].format(v=_esc(str(v), quote=True))}</td>")
            else:
                cells.append(f"<td{cls}{data}>{_esc(_fmt(v))}</td>")
        attr = f' data-{row_attr}="{_esc(str(row.get(row_attr)))}"' if row_attr else ""
        body.append(f"<tr{attr}>{''.join(cells)}</tr>")
    return (f'<div class="scroll"><table class="sortable" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _cards(items: list[tuple[str, Any]]) -> str:
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{_esc(k)}</div><div class="v">{_esc(_fmt(v))}</div></div>'
        for k, v in items) + "</div>"


def _page(title: str, subtitle: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole document: header with a table of contents, then (id, heading, html) sections."""
    from hierfl import __version__

    nav = "".join(f'<a href="#{sid}">{_esc(head)}</a>' for sid, head, _ in sections)
    body = "".join(f'<section id="{sid}"><h2>{_esc(head)}</h2>{content}</section>' for sid, head, content in sections)
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="hierfl {_esc(__version__)}">'
            f"<title>{_esc(title)}</title><style>{_CSS}</style></head>\n"
            f"<body><header><h1>{_esc(title)}</h1><p>{subtitle}</p><nav>{nav}</nav></header>\n"
            f"<main>{body}</main>\n<script>{_JS}</script></body></html>\n")


# -- charts ---------------------------------------------------------------------------------------------

_SALT = [0]


def _svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG markup (no XML prolog; ids unique within the page)."""
    import matplotlib

    _SALT[0] += 1
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"hierfl-report-{_SALT[0]}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    fig.clear()
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _png(fig: Any, dpi: int = 100) -> str:
    """A matplotlib figure as a base64 ``data:`` URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    fig.clear()
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _curve_figure(series: list[tuple[str, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]],
                  metric: str, x: str, target: float | None = None) -> str:
    """One chart: each series is (label, xs, mean, low, high); a band where low/high are given."""
    from hierfl.viz.plot import X_LABELS, new_figure

    fig = new_figure(6.4, 3.6)
    ax = fig.add_subplot()
    for label, xs, ys, lo, hi in series:
        (line,) = ax.plot(xs, ys, label=label, linewidth=1.5)
        if lo is not None and hi is not None:
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    if target is not None and metric == "accuracy":
        ax.axhline(target, linestyle="--", color="0.45", linewidth=1.0, label=f"target {target:g}")
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    if len(series) > 1 or target is not None:
        ax.legend(loc="best", fontsize="small")
    return _svg(fig)


def _charts(figures: list[tuple[str, str]], bands: list[int] | None = None) -> str:
    """Figures in a grid; ``bands`` (per figure) says how many series have a band (``data-bands``)."""
    bands = bands or [0] * len(figures)
    return '<div class="charts">' + "".join(
        f'<figure class="chart" data-bands="{b}">{svg}<figcaption>{_esc(cap)}</figcaption></figure>'
        for (cap, svg), b in zip(figures, bands)) + "</div>"


# -- a run ----------------------------------------------------------------------------------------------

def _device_activity(events: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per device id: seconds and counts of each span name, bytes moved, from the trace's device lanes."""
    pids = {e.get("pid") for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
            and "device" in str((e.get("args") or {}).get("name", "")).lower()}
    out: dict[int, dict[str, float]] = {}
    for e in events:
        if e.get("pid") not in pids or not isinstance(e.get("tid"), int):
            continue
        ph = e.get("ph")
        if ph == "X":
            row = out.setdefault(e["tid"], {})
            name = str(e.get("name"))
            dur = float(e.get("dur") or 0.0) / 1e6
            row[f"{name}_s"] = row.get(f"{name}_s", 0.0) + dur
            row[f"{name}_n"] = row.get(f"{name}_n", 0) + 1
            b = (e.get("args") or {}).get("bytes")
            if isinstance(b, (int, float)) and name in ("download", "upload"):
                row[f"{name}_bytes"] = row.get(f"{name}_bytes", 0) + int(b)
        elif ph in ("i", "I") and e.get("name") in ("lost", "stragglers_dropped", "nonfinite_dropped"):
            row = out.setdefault(e["tid"], {})
            row["events_lost"] = row.get("events_lost", 0) + 1
    return out


def _device_updates(lines: list[dict[str, Any]], flat: bool) -> dict[int, dict[str, float]]:
    """Per device id: applied updates with a staleness (asynchronous aggregations), their mean and max
    staleness, and updates dropped as too stale, from ``metrics.jsonl``."""
    acc: dict[int, list[int]] = {}
    dropped: dict[int, int] = {}
    for r in lines:
        ev = r.get("event")
        ids, st = r.get("ids"), r.get("staleness")
        from_devices = ev == "edge_aggregate" or (ev == "cloud_aggregate" and r.get("tier") == "device")
        if from_devices and isinstance(ids, list) and isinstance(st, list) and len(ids) == len(st):
            for d, s in zip(ids, st):
                if isinstance(d, int) and isinstance(s, (int, float)):
                    acc.setdefault(d, []).append(int(s))
        if ev == "update_dropped" and isinstance(r.get("source"), int) and (r.get("tier") == "edge" or flat):
            dropped[r["source"]] = dropped.get(r["source"], 0) + 1
    out: dict[int, dict[str, float]] = {}
    for d, values in acc.items():
        out[d] = {"stale_updates": len(values), "staleness_mean": float(np.mean(values)),
                  "staleness_max": int(max(values))}
    for d, n in dropped.items():
        out.setdefault(d, {})["dropped_stale"] = n
    return out


def _device_table(devices: list[dict[str, Any]], groups: list[tuple[str, list[int]]],
                  activity: dict[int, dict[str, float]], updates: dict[int, dict[str, float]]) -> str:
    group_of = {d: label for label, members in groups for d in members}
    lost = any(x.get("events_lost") for x in activity.values())
    rows = []
    for dev in devices:
        d = dev.get("device")
        if not isinstance(d, int):
            continue
        a, u = activity.get(d, {}), updates.get(d, {})
        row = {"device": d, "group": group_of.get(d, ""), "tier": dev.get("tier"), "samples": dev.get("samples"),
               "train jobs": a.get("train_n"), "train s": a.get("train_s"),
               "download s": a.get("download_s"), "upload s": a.get("upload_s"),
               "bytes down": a.get("download_bytes"), "bytes up": a.get("upload_bytes")}
        if updates:
            row.update({"async updates": u.get("stale_updates"), "staleness mean": u.get("staleness_mean"),
                        "staleness max": u.get("staleness_max"), "dropped (stale)": u.get("dropped_stale")})
        if lost:
            row["lost / dropped"] = a.get("events_lost")
        row.update({k: v for k, v in dev.items() if k.startswith("energy")})
        row.update({k: v for k, v in dev.items() if k not in row and k != "edge"})
        rows.append(row)
    if not rows:
        return '<p class="note">No devices.csv in this run directory.</p>'
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    cols = [c for c in columns if any(r.get(c) not in (None, "") for r in rows)]
    text = {c for c in cols if any(isinstance(r.get(c), str) for r in rows)}
    note = ""
    if len(rows) > _MAX_TABLE_ROWS:
        note = f'<p class="note">The first {_MAX_TABLE_ROWS:,} of {len(rows):,} devices are listed (devices.csv has all).</p>'
        rows = rows[:_MAX_TABLE_ROWS]
    energy = " Energy columns (joules) come from the scenario's energy: section." if any(
        c.startswith("energy") for c in cols) else ""
    intro = ('<p class="note">devices.csv, with what the trace says each device did: train jobs and busy '
             "seconds (emulated), seconds and bytes of model downloads and uploads"
             + ("; staleness of every update an asynchronous aggregation applied (metrics.jsonl)" if updates else "")
             + f". Click a heading to sort.{energy}</p>")
    return intro + note + _table(cols, rows, "device-table", text_cols=text, row_attr="device")


def _hierarchy(groups: list[tuple[str, list[int]]], note: str) -> str:
    parts = []
    for label, members in groups:
        devs = "".join(f'<span class="dev" data-device="{d}">{d}</span>' for d in members)
        parts.append(f'<div class="group" data-group="{_esc(label, quote=True)}"><h3>{_esc(label)} '
                     f'<span class="note">({len(members)} device{"s" * (len(members) != 1)})</span></h3>{devs}</div>')
    return f'<p class="note">{_esc(note)}.</p><div class="groups">{"".join(parts)}</div>'


def _timeline(events: list[dict[str, Any]], groups: list[tuple[str, list[int]]], max_devices: int,
              t_end: float | None) -> str:
    """The Gantt chart: the cloud, then each group's leader lane followed by its device lanes, up to the
    run's stop (``t_end``; the last span's end for a run without a summary). Drawn as ``hierfl timeline``
    draws it (:func:`hierfl.viz.timeline.draw_timeline`)."""
    from hierfl.viz.plot import new_figure
    from hierfl.viz.timeline import _build_lanes, draw_timeline, grouped_rows

    lanes, global_instants = _build_lanes(events)
    if not lanes:
        return '<p class="note">trace.json has no lanes (no spans or thread names).</p>'
    tl = grouped_rows(lanes, groups, max_devices)
    if t_end is None:
        ends = [s + d for ln in lanes for s, d, _ in ln.spans] + [t for ln in lanes for t, _ in ln.instants]
        t_end = max(ends, default=0.0) or 1.0

    def picture(t_lo: float, t_hi: float, title: str) -> str:
        fig = new_figure(13.0, max(2.5, 0.19 * len(tl.rows) + 1.6))
        draw_timeline(fig, tl, global_instants, t_lo, t_hi, title, title_loc="left")
        return _png(fig, dpi=90)

    whole = picture(0.0, t_end, f"the whole run, 0–{t_end:g} s")
    # a magnified start, so single rounds can be told apart when the run is long
    spans = sorted(d for ln in lanes for _, d, _ in ln.spans)
    typical = spans[len(spans) // 2] if spans else 0.0
    zoom_end = t_end / 10.0
    zoom = picture(0.0, zoom_end, f"magnified: the first {zoom_end:.3g} s") if typical and zoom_end > typical * 3 \
        and t_end > typical * 100 else None
    bound = (f"{tl.drawn} of {tl.total} devices drawn (at most {max_devices}, taken evenly from every group, lowest "
             "ids first; <code>--max-devices</code> draws more); every device is in the tables."
             if tl.drawn < tl.total else f"All {tl.total} devices drawn.")
    return (f'<div class="timeline"><p class="note">One row per entity: the cloud, then every leader (bold) with '
            f"its devices under it, on shaded bands per group. Bars are busy spans, gaps idle time, ticks "
            f"point events (an aggregation, an evaluation, …; their names are in the legend). {bound}</p>"
            f'<img alt="timeline of the cloud, leaders and devices" src="{whole}">'
            + (f'<img alt="the first tenth of the timeline, magnified" src="{zoom}">' if zoom else "") + "</div>")


def _summary_cards(s: dict[str, Any], n_devices: int) -> str:
    items = [("status", s.get("status")), ("protocol", s.get("protocol")),
             ("final accuracy", s.get("final_accuracy")), ("best accuracy", s.get("best_accuracy")),
             ("final loss", s.get("final_loss")),
             (f"time to {s.get('target_accuracy'):g}" if isinstance(s.get("target_accuracy"), (int, float))
              else "time to target", "not reached" if s.get("status") and s.get("time_to_target_s") is None
              else s.get("time_to_target_s")),
             ("cloud rounds", s.get("rounds")), ("emulated time (s)", s.get("virtual_time_s")),
             ("devices", s.get("devices", n_devices)), ("edge servers", s.get("edge_servers")),
             ("parameters", s.get("num_params")), ("wall time (s)", s.get("wall_s")),
             ("stop reason", s.get("stop_reason"))]
    out = _cards([(k, v) for k, v in items if v is not None])
    totals = s.get("totals") or {}
    if totals:
        out += ('<p class="note">Totals over the run (summary.json):</p>'
                + _table(list(totals), [totals], "totals-table"))
    staleness = s.get("staleness") if isinstance(s.get("staleness"), dict) else {}
    figures = []
    for tier, st in staleness.items():
        hist = st.get("histogram") if isinstance(st, dict) else None
        if not hist:
            continue
        from hierfl.viz.plot import new_figure

        fig = new_figure(6.4, 2.8)
        ax = fig.add_subplot()
        ax.bar([int(k) for k in hist], list(hist.values()), width=1.0, color="tab:purple")
        ax.set_xlabel("staleness τ (versions behind)")
        ax.set_ylabel("applied updates")
        ax.grid(True, axis="y", alpha=0.3)
        caption = (f"staleness of the updates applied at the {tier}: mean {_fmt(st.get('mean'))}, "
                   f"max {_fmt(st.get('max'))}, {_fmt(st.get('count'))} updates")
        figures.append((caption, _svg(fig)))
    if figures:
        out += _charts(figures)
    if isinstance(s.get("queues"), dict) and s["queues"]:
        out += _queues_table(s["queues"])
    extra = {k: _rounded(s[k]) for k in ("energy", "robustness", "warnings", "error") if k in s}
    if extra:
        out += f"<pre>{_esc(yaml.safe_dump(extra, sort_keys=False, width=110))}</pre>"
    return out


def _rounded(value: Any) -> Any:
    """``value`` with every float to 4 significant digits, for reading (summary.json keeps them whole)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _queues_table(queues: dict[str, Any]) -> str:
    """``summary.json``'s ``queues`` as a table: a row per tier (all its servers) and per server."""
    rows = []
    for tier, q in queues.items():
        if not isinstance(q, dict):
            continue
        rows.append({"tier": tier, "server": "all (total)", "mean queued updates": q.get("mean"),
                     "most queued updates": q.get("max")})
        for entity, e in (q.get("by_entity") or {}).items():
            if isinstance(e, dict):
                rows.append({"tier": tier, "server": f"{tier} {entity}", "mean queued updates": e.get("mean"),
                             "most queued updates": e.get("max")})
    return ('<p class="note">Update queues (summary.json <code>queues</code>): updates waiting at each server, '
            "time-weighted mean over the run and the most at once.</p>"
            + _table(["tier", "server", "mean queued updates", "most queued updates"], rows, "queues-table",
                     text_cols={"tier", "server"}))


def _run_curves(run_dir: Path, target: float | None) -> str:
    figures = []
    for metric in ("accuracy", "loss"):
        for x in ("time", "round"):
            try:
                xs, ys = eval_series(run_dir, metric=metric, x=x)
            except RunReadError:
                continue
            ok = ~np.isnan(ys)
            if not ok.any():
                continue
            where = "emulated time" if x == "time" else "cloud rounds"
            figures.append((f"{metric} against {where}",
                            _curve_figure([(metric, xs[ok], ys[ok], None, None)], metric, x, target)))
    if not figures:
        return '<p class="note">No evaluation in metrics.jsonl (a timing-only run, or one that stopped early).</p>'
    return _charts(figures)


def _trace_link(rel: str, exists: bool) -> str:
    if not exists:
        return '<p class="note">This run has no trace.json (the trace was turned off).</p>'
    return (f'<p>The full event trace: <a href="{_esc(rel, quote=True)}">{_esc(rel)}</a> (Chrome / Perfetto trace '
            'events, emulated time). To explore it, open <a href="https://ui.perfetto.dev" rel="noreferrer">'
            "ui.perfetto.dev</a> and drag the file onto the page, or use “Open trace file”: the trace is read in "
            "your browser and not uploaded. <code>chrome://tracing</code> opens it too.</p>")


def _config_block(path: Path) -> str:
    if not path.is_file():
        return f'<p class="note">No {_esc(path.name)}.</p>'
    return f'<pre id="config">{_esc(path.read_text(encoding="utf-8", errors="replace"))}</pre>'


def _relpath(target: Path, start: Path) -> str:
    import os

    try:
        return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return target.resolve().as_uri()


def run_report_html(run_dir: Path, out: Path, max_devices: int = MAX_DEVICE_LANES) -> str:
    """The page of one run directory (``out`` is where it goes: links are relative to it)."""
    run_dir = Path(run_dir)
    lines = read_metrics(run_dir)
    summary = read_summary(run_dir)
    devices = read_devices(run_dir)
    clusters = read_clusters(run_dir)
    groups, note = device_groups(clusters, devices)
    trace_path = run_dir / "trace.json"
    events: list[dict[str, Any]] = []
    trace_note = ""
    if trace_path.is_file():
        try:
            events = read_trace(run_dir)
        except RunReadError as exc:
            trace_note = f'<p class="note">trace.json could not be read: {_esc(str(exc))}</p>'
    flat = all(label == "cloud" for label, _ in groups)
    target = summary.get("target_accuracy") if isinstance(summary.get("target_accuracy"), (int, float)) else None
    name = summary.get("name") or run_dir.resolve().name
    sections = [("summary", "Summary", _summary_cards(summary, len(devices))
                 if summary else '<p class="note">No summary.json: the run is still going or was killed.</p>'),
                ("curves", "Accuracy and loss", _run_curves(run_dir, target)),
                ("hierarchy", "Hierarchy", _hierarchy(groups, note)),
                ("timeline", "Timeline", trace_note or (_timeline(events, groups, max_devices, _stop_time(summary)) if events
                                                        else '<p class="note">No trace.json.</p>')),
                ("devices", "Devices", _device_table(devices, groups, _device_activity(events),
                                                     _device_updates(lines, flat))),
                ("trace", "Trace", _trace_link(_relpath(trace_path, out.parent), trace_path.is_file())),
                ("scenario", "Scenario as it ran (config.yaml)", _config_block(run_dir / "config.yaml"))]
    sub = (f"run directory <code>{_esc(str(run_dir))}</code> — protocol {_esc(str(summary.get('protocol', '?')))}, "
           f"{len(devices)} devices, status {_esc(str(summary.get('status', 'unknown')))}")
    return _page(f"hierfl report — {name}", sub, sections)


def _stop_time(summary: dict[str, Any]) -> float | None:
    stop = summary.get("virtual_time_s")
    return float(stop) if isinstance(stop, (int, float)) and not isinstance(stop, bool) and stop > 0 else None


# -- a sweep --------------------------------------------------------------------------------------------

def _band_series(runs: list[Any], metric: str, x: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                  int] | None:
    from hierfl.sweep.aggregate import common_grid

    series = []
    for r in runs:
        try:
            xs, ys = eval_series(r.dir, metric=metric, x=x)
        except RunReadError:
            continue
        ok = ~np.isnan(ys)
        if ok.sum() >= 1:
            series.append((xs[ok], ys[ok]))
    if not series:
        return None
    grid, values = common_grid(series)
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0), len(series)


def sweep_report_html(sweep_dir: Path, out: Path, group_by: str | None = None) -> str:
    """The page of a sweep directory: groups (mean ± 95 % CI), curves with min–max bands, trials."""
    from hierfl.sweep.aggregate import group_runs, sweep_runs, sweep_table
    from hierfl.sweep.run import sweep_rows

    sweep_dir = Path(sweep_dir)
    manifest = json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))
    runs = sweep_runs(sweep_dir)
    groups = group_runs(runs, group_by)
    spec = manifest.get("spec") or {}
    metric = spec.get("metric", "accuracy") if isinstance(spec.get("metric"), str) else "accuracy"
    targets = {r.summary.get("target_accuracy") for r in runs} - {None}
    target = next(iter(targets)) if len(targets) == 1 else None

    figures = []
    band_counts = []
    for m in dict.fromkeys([metric, "accuracy", "loss"]):
        for x in ("time", "round"):
            series = []
            for label, members in groups.items():
                band = _band_series(members, m, x)
                if band is not None:
                    grid, mean, lo, hi, n = band
                    series.append((f"{label} (n={n})", grid, mean, lo if n > 1 else None, hi if n > 1 else None))
            if series:
                where = "emulated time" if x == "time" else "cloud rounds"
                figures.append((f"{m} against {where}: mean over seeds, band from min to max",
                                _curve_figure(series, m, x, target)))
                band_counts.append(sum(lo is not None for _, _, _, lo, _ in series))
    curves = _charts(figures, band_counts) if figures else '<p class="note">No trial has evaluated yet.</p>'

    table_rows = sweep_table(sweep_dir, group_by=group_by, metric=metric)
    cols = list(table_rows[0]) if table_rows else []
    groups_html = ('<p class="note">Per group (' + _esc(group_by or "grid point") + "): final "
                   + _esc(metric) + " and time to target as mean and 95 % confidence half-width over seeds "
                   "(the numbers of <code>hierfl table</code>).</p>"
                   + _table(cols, table_rows, "group-table", text_cols={"group"}))

    rows = sweep_rows(sweep_dir)
    keep = ["trial", "status", "seed", *[k for k in (rows[0] if rows else {}) if k.endswith(".name")],
            "final_accuracy", "best_accuracy", "time_to_target_s", "rounds", "virtual_time_s", "wall_s", "error"]
    for r in rows:
        r["trace"] = r["run_dir"] + "/trace.json" if (sweep_dir / r["run_dir"] / "trace.json").is_file() else ""
        r["trace"] = _relpath(sweep_dir / r["trace"], out.parent) if r["trace"] else ""
    cols = [c for c in keep if any(r.get(c) not in (None, "") for r in rows)] + ["trace"]
    trials = _table(cols, rows, "trial-table", text_cols={"trial", "status", "error", "run_dir", "trace",
                                                          *[c for c in cols if c.endswith(".name")]},
                    raw={"trace": '<a href="{v}">trace.json</a>'}, row_attr="trial")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    cards = _cards([("trials", len(rows)), *counts.items(), ("groups", len(groups)),
                    ("seeds per group", max((len(m) for m in groups.values()), default=0))])
    spec_text = yaml.safe_dump(spec, sort_keys=False, width=110) if spec else json.dumps(manifest, indent=2)
    first_config = runs[0].dir / "config.yaml"
    origin = f" from <code>{_esc(str(manifest['sweep_file']))}</code>" if manifest.get("sweep_file") else ""
    config = (f'<p class="note">The sweep (resolved){origin}:</p><pre id="sweep-spec">{_esc(spec_text)}</pre>'
              f"<p class=\"note\">The scenario of trial {_esc(runs[0].id)} as it ran (the others differ by the grid "
              f"values and the seed):</p>{_config_block(first_config)}")
    trace_note = ('<p class="note">Every trial wrote its own Chrome / Perfetto trace (the trace column above); open one '
                  'at <a href="https://ui.perfetto.dev" rel="noreferrer">ui.perfetto.dev</a> (drag the file onto the '
                  "page; it is read in your browser, not uploaded). <code>hierfl report SWEEP_DIR/runs/ID</code> "
                  "gives the page of one trial.</p>")
    sections = [("summary", "Summary", cards), ("groups", "Groups", groups_html), ("curves", "Curves", curves),
                ("trials", "Trials", trials + trace_note), ("scenario", "Sweep and scenario", config)]
    name = manifest.get("name") or sweep_dir.resolve().name
    sub = (f"sweep directory <code>{_esc(str(sweep_dir))}</code> — {len(rows)} trials in {len(groups)} groups "
           f"by {_esc(group_by or 'grid point')}")
    return _page(f"hierfl sweep report — {name}", sub, sections)


# -- entry point ----------------------------------------------------------------------------------------

def write_report(path: str | Path, out: str | Path | None = None, *, max_devices: int = MAX_DEVICE_LANES,
                 group_by: str | None = None) -> Path:
    """Write the report of a run directory or a sweep directory (default ``PATH/report.html``).

    Raises :class:`RunReadError` (a ``ValueError``) when ``path`` is neither, naming what is missing.
    """
    path = Path(path)
    if not path.exists():
        raise RunReadError(f"{path}: no such directory")
    if not path.is_dir():
        raise RunReadError(f"{path}: not a directory (give a run directory or a sweep directory)")
    if max_devices < 0:
        raise ValueError(f"max_devices must be >= 0, got {max_devices}")
    target = Path(out) if out is not None else path / "report.html"
    if (path / "sweep.json").is_file():
        text = sweep_report_html(path, target, group_by=group_by)
    elif (path / "metrics.jsonl").is_file():
        if group_by is not None:
            raise ValueError("--group-by takes a sweep directory; this is a run directory")
        text = run_report_html(path, target, max_devices=max_devices)
    else:
        raise RunReadError(f"{path}: not a run directory (no metrics.jsonl) nor a sweep directory (no sweep.json)")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target
