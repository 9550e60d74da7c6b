"""Outputs that stay bounded at scale (scale, item 3): long per-update lists become summaries
(``output.list_limit``), queue-length counters are coalesced in time (``output.trace_counter_s``),
and staleness is kept as a histogram; a resumed run writes the same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hierfl.driver import resume_run, run_scenario
from hierfl.output.bounded import bound_lists, summary_of
from hierfl.output.trace import TraceWriter
from hierfl.scenario.loader import validate_raw


def test_short_lists_are_left_alone_and_long_ones_summarised():
    fields = {"ids": [1, 2, 3], "weights": [0.5, 0.25], "nested": {"x": [1]}, "n": 4}
    assert bound_lists(fields, 3) is fields                # nothing over the limit: the very dict
    out = bound_lists({"ids": [4, 1, 7, 2], "tag": "a", "inner": {"staleness": [0, 3, 3]}, "names": ["a"] * 5}, 3)
    assert out["ids"] == {"count": 4, "min": 1, "max": 7, "mean": 3.5}
    assert out["inner"] == {"staleness": [0, 3, 3]} and out["tag"] == "a"
    assert out["names"] == {"count": 5}                     # not numbers: the count only
    assert summary_of([True, False]) == {"count": 2}        # bools are not numbers here
    assert bound_lists({"ids": list(range(500))}, None) == {"ids": list(range(500))}


def test_a_counter_track_keeps_every_value_that_lasted_at_its_own_time(tmp_path):
    w = TraceWriter(tmp_path / "trace.json", counter_s=1.0)
    track = w.counter_track(("edge", 0), "queue_len edge 0", "updates")
    for t, v in [(0.0, 0), (0.2, 1), (0.5, 2), (1.6, 3), (1.7, 4), (5.0, 0)]:
        track.sample(t, v)
    assert track.state() == (5.0, None)
    track.sample(5.3, 1)          # within the window: held ...
    assert track.state() == (5.0, (5.3, 1))
    track.close()                 # ... and written when the run ends
    w.close()
    events = json.loads((tmp_path / "trace.json").read_text())
    # 0.2 → 1 lasted 0.3 s < 1 s and is dropped; every other value is written when it began
    assert [(e["ts"] / 1e6, e["args"]["updates"]) for e in events] == [
        (0.0, 0), (0.5, 2), (1.6, 3), (1.7, 4), (5.0, 0), (5.3, 1)]


def _ahfl(extra: dict[str, Any] | None = None) -> Any:
    raw = {
        "name": "bounds", "seed": 4,
        "data": {"dataset": {"name": "blobs", "num_samples": 3000, "test_samples": 200, "num_features": 8,
                             "num_classes": 3}, "partition": {"name": "iid"}},
        "model": {"name": "logreg"},
        "devices": {"count": 300, "speed_sps": {"dist": "lognormal", "median": 20, "sigma": 0.5},
                    "uplink_mbps": 10, "downlink_mbps": 50, "latency_ms": 10},
        "topology": {"edge_servers": 2},
        "protocol": {"name": "ahfl", "leader_period": 1.0, "cloud_period": 2.0},
        "training": {"epochs": 1, "batch_size": 10, "lr": 0.05, "trainer": "none"},
        "evaluation": {"every_s": 2.0},
        "stop": {"virtual_time_s": 8.0}, "runtime": {"executor": "local"},
        "output": {"trace": {"devices": 10}, "list_limit": 25, "trace_counter_s": 0.5},
    }
    for key, value in (extra or {}).items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return validate_raw(raw)


def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _counters(run: Path) -> list[tuple[str, float, int]]:
    return [(e["name"], e["ts"], e["args"]["updates"]) for e in json.loads((run / "trace.json").read_text())
            if e.get("ph") == "C"]


def test_a_large_run_writes_bounded_lines_and_a_coalesced_subset_of_the_counters(tmp_path):
    run_scenario(_ahfl(), tmp_path / "bounded")
    run_scenario(_ahfl({"output": {"list_limit": None, "trace_counter_s": 0}}), tmp_path / "whole")
    bounded, whole = _lines(tmp_path / "bounded"), _lines(tmp_path / "whole")
    assert len(bounded) == len(whole)
    summarised = 0
    for b, w in zip(bounded, whole):
        assert b["event"] == w["event"] and b["t"] == w["t"]
        for key, value in w.items():
            if isinstance(value, list) and len(value) > 25:   # 150 devices per edge: long queues
                summarised += 1
                nums = value
                assert b[key] == {"count": len(nums), "min": min(nums), "max": max(nums),
                                  "mean": sum(nums) / len(nums)}
            elif key not in ("wall_s", "startup_s"):
                assert b[key] == value
    assert summarised > 0
    # the same staleness means either way (a histogram now, not a list of every update)
    evals = [x for x in bounded if x["event"] == "eval"]
    assert evals[-1]["staleness_mean_edge"] == pytest.approx(
        next(x for x in reversed(whole) if x["event"] == "eval")["staleness_mean_edge"], abs=0)
    full, kept = _counters(tmp_path / "whole"), _counters(tmp_path / "bounded")
    assert 0 < len(kept) < len(full) / 2
    assert set(kept) <= set(full)  # every sample written is one of the full trace's, at its own time
    by_track: dict[str, list[float]] = {}
    for name, ts, _ in kept:
        by_track.setdefault(name, []).append(ts / 1e6)
    for times in by_track.values():  # at most two samples in any half second
        assert all(b - a >= 0.5 - 1e-9 for a, b in zip(times, times[2:]))


def test_resume_writes_the_held_counter_samples_as_the_uninterrupted_run(tmp_path):
    sc = _ahfl({"runtime": {"executor": "local", "checkpoint": {"every_cloud_aggregations": 1}}})
    ref = tmp_path / "ref"
    run_scenario(sc, ref)

    def stop(t: float, rounds: int, acc: float | None) -> None:
        if rounds >= 2:
            raise KeyboardInterrupt

    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(sc, out, progress=stop)
    assert resume_run(out).summary["status"] == "completed"
    assert (out / "trace.json").read_bytes() == (ref / "trace.json").read_bytes()
    strip = [{k: v for k, v in x.items() if k not in ("wall_s", "startup_s")} for x in _lines(ref) if x["event"] != "recovered"]
    assert [{k: v for k, v in x.items() if k not in ("wall_s", "startup_s")} for x in _lines(out)] == strip
