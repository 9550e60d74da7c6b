"""The output side's fast paths (scale) write exactly the bytes of the general paths they skip.

* ``jsonsafe.jsonable`` skips ``clean`` for plain values: the JSON text must be that of
  ``clean(value)`` for every value, and the skip must actually happen for plain ones;
* ``CounterTrack.sample`` forms a trace counter event by concatenation: the same bytes as
  ``TraceWriter.counter``, and no JSON encoding or cleaning per sample;
* ``QueueTracker.set`` updates its series inline: the same series as ``StepSeries.set`` gives.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

import hierfl.output.jsonsafe as jsonsafe
import hierfl.output.trace as trace_mod
from hierfl.kernel.timeseries import QueueTracker, StepSeries
from hierfl.output.jsonsafe import clean, is_plain, jsonable
from hierfl.output.telemetry import RunTelemetry
from hierfl.output.trace import TraceWriter

_COMPACT = json.JSONEncoder(separators=(",", ":")).encode  # the trace's encoder

# (value, whether it is plain: encoded as it is, without clean)
TABLE: list[tuple[object, bool]] = [
    (0.1, True), (1e-300, True), (5e-324, True), (-0.0, True), (1.7976931348623157e308, True), (3600.000001, True),
    (math.nan, False), (math.inf, False), (-math.inf, False),
    (0, True), (-7, True), (10 ** 400, True), (True, True), (False, True), (None, True), ("é \" \\ \n ☃", True),
    (np.float64(0.1), False), (np.float32(0.1), False), (np.int64(3), False), (np.bool_(True), False),
    (np.float64("nan"), False),
    ([], True), ({}, True), ((), True), ([1, 2, 3], True), ((1, 2.5), True), ([0.1, 0.2, 1e-300], True),
    ([1, "a", None, True], True), ([0.5, None], True), ([0.5, math.nan], False), ([1.0, math.inf, -math.inf], False),
    ([1e308, 1e308], True),            # a finite list whose sum overflows: checked element by element
    ([10 ** 400, 1.0], True),          # an int too large for a float: OverflowError, then element by element
    ([1, np.int64(2)], False), ([0.1, np.float64(0.2)], False),
    ({"a": 1, "b": [0.1, 2], "c": {"d": None, "e": "x"}}, True),
    ({"a": {"b": [1, {"c": math.nan}]}}, False), ({"a": (1, np.float32(2))}, False),
    ({1: 0.5, 2: [3, 4]}, True),       # non-str keys: json converts them, both ways alike
    ([[1, 2], [0.1, [None, True]]], True), ([[1, 2], [0.1, [math.inf]]], False),
]


@pytest.mark.parametrize(("value", "plain"), TABLE, ids=[repr(v)[:40] for v, _ in TABLE])
def test_jsonable_writes_the_bytes_of_clean(value, plain):
    assert is_plain(value) is plain  # plain values skip clean (the fast path is taken), others do not
    for encode in (json.dumps, _COMPACT):
        assert encode(jsonable(value)) == encode(clean(value))
    if plain:
        assert jsonable(value) is value


def test_random_nested_values_write_the_bytes_of_clean():
    rng = random.Random(12)
    leaves = [0.1, 1e-300, -2.5, 7, True, None, "s", math.nan, math.inf, np.float64(1.5), np.int64(4), 10 ** 30]

    def value(depth: int) -> object:
        r = rng.random()
        if depth > 3 or r < 0.4:
            return rng.choice(leaves)
        if r < 0.7:
            return [value(depth + 1) for _ in range(rng.randrange(5))]
        if r < 0.8:
            return tuple(value(depth + 1) for _ in range(rng.randrange(4)))
        return {f"k{i}": value(depth + 1) for i in range(rng.randrange(4))}

    plain = 0
    for _ in range(2000):
        v = value(0)
        plain += is_plain(v)
        assert json.dumps(jsonable(v)) == json.dumps(clean(v))
    assert 200 < plain < 1800  # both paths ran many times


def _trace_bytes(path: Path, write) -> bytes:
    w = TraceWriter(path, devices={1, 5})
    write(w)
    w.close()
    return path.read_bytes()


SAMPLES = [(0.0, 0), (0.1, 1), (1e-300, 2), (3600.123456789, 17), (2.0, 10 ** 20), (np.float64(0.3), 3), (4.0, True),
           (5.0, np.int64(6)), (6.0, 2.5), (math.inf, 1), (math.nan, 2), (7.0, 0)]
LANES = [(("edge", 3), "queue_len edge 3"), (("cloud", 0), "queue_len cloud"), (("device", 5), "q é"),
         (("device", 2), "not kept"), (("edge", np.int64(4)), "queue_len edge 4")]


def test_counter_track_writes_the_bytes_of_counter(tmp_path):
    def general(w: TraceWriter) -> None:
        for lane, name in LANES:
            for t, v in SAMPLES:
                w.counter(lane, name, t, updates=v)

    def tracks(w: TraceWriter) -> None:
        for lane, name in LANES:
            track = w.counter_track(lane, name, "updates")
            for t, v in SAMPLES:
                track.sample(t, v)

    a, b = _trace_bytes(tmp_path / "a.json", general), _trace_bytes(tmp_path / "b.json", tracks)
    assert a == b
    events = json.loads(a)
    assert len(events) == 4 * len(SAMPLES)  # the unkept device lane wrote nothing
    assert events[3] == {"ph": "C", "name": "queue_len edge 3", "cat": "edge", "ts": 3600123456.789, "pid": 2,
                         "tid": 3, "args": {"updates": 17}}


def test_queue_length_samples_neither_encode_nor_clean(tmp_path, monkeypatch):
    calls = {"encode": 0, "clean": 0}
    encode, clean_ = trace_mod._ENCODE, jsonsafe.clean

    def counting_encode(event):
        calls["encode"] += 1
        return encode(event)

    def counting_clean(value):
        calls["clean"] += 1
        return clean_(value)

    monkeypatch.setattr(trace_mod, "_ENCODE", counting_encode)
    monkeypatch.setattr(jsonsafe, "clean", counting_clean)
    now = [0.0]
    tel = RunTelemetry(tmp_path / "run", clock=lambda: now[0], trace_devices={0})
    for k in range(1000):
        now[0] = k * 0.01
        tel.queue_length("edge", k % 20, k % 7)
        tel.queue_length("cloud", 0, k // 2 % 3)  # the same length twice in a row
        tel.span(("device", 100 + k), "train", now[0], 1.0, job=k)  # a lane the trace does not keep
    assert calls == {"encode": 0, "clean": 0}
    tel.span(("device", 0), "train", 1.0, 2.0, job=1)  # a kept lane: one event, encoded, its args plain
    assert calls == {"encode": 1, "clean": 0}
    tel.close()
    events = json.loads((tmp_path / "run" / "trace.json").read_text())
    counters = [e for e in events if e["ph"] == "C"]
    # a sample only when a queue's length changes (or is first mentioned)
    # every edge call changes its queue's length (20 ≢ 0 mod 7), every other cloud call does
    assert len(counters) == 1000 + 500 and events[-1]["ph"] == "X"
    assert counters[0] == {"ph": "C", "name": "queue_len edge 0", "cat": "edge", "ts": 0.0, "pid": 2, "tid": 0,
                           "args": {"updates": 0}}


def _reference_set(tracker: QueueTracker, t: float, tier: str, entity: int, length: int) -> bool:
    """QueueTracker.set as it was, through StepSeries.set."""
    key = (tier, int(entity))
    series = tracker.series.get(key)
    if series is None:
        series = tracker.series[key] = StepSeries(0.0, 0.0)
        tracker.totals.setdefault(tier, StepSeries(0.0, 0.0))
        if length == 0:
            return True
    elif series.value == length:
        return False
    total = tracker.totals[tier]
    total.set(t, total.value + length - series.value)
    series.set(t, length)
    return True


def test_queue_tracker_matches_step_series():
    rng = random.Random(5)
    fast, ref = QueueTracker(), QueueTracker()
    t = 0.0
    for _ in range(5000):
        t += rng.choice([0.0, rng.random()])
        tier = rng.choice(["edge", "cloud"])
        entity = rng.choice([0, 1, 2, np.int64(1), 2.0])  # numpy and float ids reach the same int key
        length = rng.randrange(6)
        assert fast.set(t, tier, entity, length) == _reference_set(ref, t, tier, entity, length)
    assert fast.series.keys() == ref.series.keys()
    for key, s in ref.series.items():
        assert vars(fast.series[key]) == vars(s)
    for tier, s in ref.totals.items():
        assert vars(fast.totals[tier]) == vars(s)
    assert fast.summary(t + 1.0) == ref.summary(t + 1.0)
    with pytest.raises(ValueError, match="backwards"):
        fast.set(t - 1.0, "edge", 0, fast.series[("edge", 0)].value + 1)
    with pytest.raises(ValueError, match=">= 0"):
        fast.set(t, "edge", 9, -1)
    assert ("edge", 9) not in fast.series


def _reference_devices_csv(path: Path, world, availability, slowdowns, columns=None) -> None:
    """devices.csv as it was written before the scale work's column-wise writer: row by row, scalar calls."""
    import csv

    edges = world.edge_of
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["device", "tier", "samples", "speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms",
                    "edge", "edge_latency_ms", "compute_s_per_epoch", "download_s", "upload_s",
                    "availability", "slowdowns", *(columns or {})])
        for i in range(world.num_devices):
            edge = int(edges[i])
            extra = float(world.edge_latency_ms[i, edge]) if edge >= 0 else 0.0
            w.writerow([i, world.tier[i], int(world.samples[i]), f"{world.speed_sps[i]:.6g}",
                        f"{world.uplink_mbps[i]:.6g}",
                        f"{world.downlink_mbps[i]:.6g}", f"{world.latency_ms[i]:.6g}", edge, f"{extra:.6g}",
                        f"{world.samples[i] / world.speed_sps[i]:.6g}", f"{world.download_s(i):.6g}",
                        f"{world.upload_s(i):.6g}", availability[i] if availability else "always",
                        slowdowns[i] if slowdowns else 0, *(f"{col[i]:.6g}" for col in (columns or {}).values())])


@pytest.mark.parametrize("case", ["flat", "edges", "float32", "ints", "quoted", "energy"])
def test_devices_csv_writes_the_bytes_of_the_row_by_row_writer(tmp_path, monkeypatch, case):
    import hierfl.output.files as files
    from hierfl.core.world import EdgeLink, World

    monkeypatch.setattr(files, "_CSV_BLOCK", 7)  # several blocks, the last one short
    rng = np.random.default_rng(["flat", "edges", "float32", "ints", "quoted", "energy"].index(case))
    n, e = 50, (0 if case == "flat" else 3)
    dtype = np.float32 if case == "float32" else np.float64
    lognormal = rng.lognormal(1.0, 1.5, n)
    world = World(samples=rng.integers(1, 500, n), speed_sps=(lognormal * 37).astype(dtype),
                  uplink_mbps=(rng.integers(1, 50, n) if case == "ints" else rng.uniform(0.1, 1e4, n).astype(dtype)),
                  downlink_mbps=rng.uniform(1e-3, 1e7, n).astype(dtype),
                  latency_ms=np.where(rng.random(n) < 0.2, 0.0, rng.uniform(0, 300, n)).astype(dtype),
                  edge_of=(np.full(n, -1) if e == 0 else np.where(rng.random(n) < 0.2, -1, rng.integers(0, e, n))),
                  edge_latency_ms=rng.uniform(0, 50, (n, e)).astype(dtype),
                  edge_links=[EdgeLink(100.0, 100.0, 10.0)] * e, model_bytes=int(rng.integers(40, 10 ** 8)))
    availability = slowdowns = columns = None
    if case in ("edges", "quoted", "energy"):
        availability = [rng.choice(["always", "markov", "trace"]) for _ in range(n)]
        slowdowns = rng.integers(0, 4, n).tolist()
    if case == "quoted":  # free text the csv module must quote: the general writer
        world.tier = np.array([rng.choice(["phone", 'tab, "big"', "iot\nx"]) for _ in range(n)], dtype=object)
    if case == "energy":
        columns = {"energy_compute_j": rng.exponential(3.0, n), "energy_j": rng.exponential(1e-5, n)}
    files._devices_csv(tmp_path / "new.csv", world, availability, slowdowns, columns)
    _reference_devices_csv(tmp_path / "old.csv", world, availability, slowdowns, columns)
    new, old = (tmp_path / "new.csv").read_bytes(), (tmp_path / "old.csv").read_bytes()
    assert new == old
    assert new.count(b"\r\n") >= n + 1
