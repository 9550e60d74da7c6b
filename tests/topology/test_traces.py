"""Trace import: FedScale capacity / availability files and our CSVs, mapping to devices, bad files."""

import json
import math
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.assemble import build, train_spec
from hierfl.config.errors import ConfigError
from hierfl.core.rng import stream
from hierfl.driver import run_scenario
from hierfl.dynamics.availability import AvailabilityTraceConfig
from hierfl.scenario.loader import load_scenario
from hierfl.traces import (
    Availability,
    Capacity,
    TraceError,
    load_availability,
    load_capacity,
    map_clients,
    write_availability_csv,
    write_availability_fedscale,
    write_capacity_csv,
    write_capacity_fedscale,
)
from tests.conftest import TINY

CAPS = {3: Capacity(2.0, 1000.0, 1000.0), 1: Capacity(0.5, 250.5, 250.5), 12: Capacity(7.25, 64.0, 64.0)}
AVAIL = {7: Availability(((0.0, 10.5), (30.0, 45.0)), 60.0), 2: Availability(((5.0, 6.0),), 100.0)}


@pytest.mark.parametrize("writer,loader,data,fmt,suffix", [
    (write_capacity_csv, load_capacity, CAPS, "csv", ".csv"),
    (write_capacity_fedscale, load_capacity, CAPS, "fedscale", ".pkl"),
    (lambda p, c: write_capacity_fedscale(p, c, as_json=True), load_capacity, CAPS, "fedscale", ".json"),
    (write_availability_csv, load_availability, AVAIL, "csv", ".csv"),
    (write_availability_fedscale, load_availability, AVAIL, "fedscale", ".pkl"),
    (lambda p, a: write_availability_fedscale(p, a, as_json=True), load_availability, AVAIL, "fedscale", ".json"),
])
def test_trace_round_trip(tmp_path, writer, loader, data, fmt, suffix):
    """Capacity and availability traces written in each format load back equal."""
    path = tmp_path / ("trace" + suffix)
    writer(path, data)
    assert loader(path, fmt) == data


def test_capacity_csv_keeps_asymmetric_links_and_string_ids(tmp_path):
    caps = {"phone-a": Capacity(1.5, 100.0, 900.0), "phone-b": Capacity(3.0, 50.0, 60.0)}
    write_capacity_csv(tmp_path / "c.csv", caps)
    assert load_capacity(tmp_path / "c.csv", "csv") == caps
    with pytest.raises(ValueError, match="one bandwidth"):
        write_capacity_fedscale(tmp_path / "c.pkl", caps)


def test_availability_csv_without_period(tmp_path):
    avail = {1: Availability(((0.0, 3.0), (7.0, 9.0)), None)}
    write_availability_csv(tmp_path / "a.csv", avail)
    assert (tmp_path / "a.csv").read_text().splitlines()[0] == "client_id,start_s,end_s"
    assert load_availability(tmp_path / "a.csv", "csv") == avail


def test_fedscale_behaviour_trace_semantics(tmp_path):
    trace = {
        # two sessions; the second runs past finish_time and is clipped (FedScale reduces t mod finish_time)
        101: {"duration": 60, "active": [10, 50], "inactive": [20, 70], "finish_time": 60, "model": "x"},
        # one more active than inactive: online until finish_time
        102: {"duration": 40, "active": [0, 30], "inactive": [10], "finish_time": 40, "model": "x"},
        # touching sessions merge; a session starting after finish_time is never reached
        103: {"active": [0, 10, 90], "inactive": [10, 20, 95], "finish_time": 80},
    }
    (tmp_path / "behave").write_bytes(pickle.dumps(trace))
    got = load_availability(tmp_path / "behave", "fedscale")
    assert got[101] == Availability(((10.0, 20.0), (50.0, 60.0)), 60.0)
    assert got[102] == Availability(((0.0, 10.0), (30.0, 40.0)), 40.0)
    assert got[103] == Availability(((0.0, 20.0),), 80.0)

    def fedscale_is_active(rec, t):  # FedScale's condition, without its sequential index bookkeeping
        norm = t % rec["finish_time"]
        return any(a <= norm <= b for a, b in zip(rec["active"], rec["inactive"] + [rec["finish_time"]]))

    for cid, rec in trace.items():
        for t in np.arange(0.25, 400, 0.5):  # off the interval ends, where closed and half-open differ
            assert got[cid].is_available(t) == fedscale_is_active(rec, t), (cid, t)


def test_numpy_values_in_a_fedscale_pickle_are_accepted(tmp_path):
    data = {np.int64(5): {"computation": np.float64(3.5), "communication": np.float32(2048.0)}}
    (tmp_path / "cap").write_bytes(pickle.dumps({int(k): v for k, v in data.items()}))
    assert load_capacity(tmp_path / "cap", "fedscale") == {5: Capacity(3.5, 2048.0, 2048.0)}


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


BAD_TRACES = [
    ("capacity", "c.csv", "client_id,compute_ms_per_sample,uplink_kbps\n1,2,3\n", "c.csv:1", "header must be"),
    ("capacity", "c.csv", "client_id,compute_ms_per_sample,uplink_kbps,downlink_kbps\n1,2,3,4\n2,x,3,4\n",
     "c.csv:3", "compute_ms_per_sample must be a number"),
    ("capacity", "c.csv", "# comment\nclient_id,compute_ms_per_sample,uplink_kbps,downlink_kbps\n1,2,3,4\n2,1,0,4\n",
     "c.csv:4", "uplink_kbps must be > 0"),
    ("capacity", "c.csv", "client_id,compute_ms_per_sample,uplink_kbps,downlink_kbps\n1,2,3,4\n1,2,3,4\n",
     "c.csv:3", "appears twice"),
    ("capacity", "c.csv", "client_id,compute_ms_per_sample,uplink_kbps,downlink_kbps\n1,2,3\n", "c.csv:2",
     "expected 4 fields"),
    ("capacity", "c.csv", "", "c.csv", "empty file"),
    ("capacity", "c.json", '{"1": {"computation": 2.0, "communication": 5},\n "2": {"computation": -1, '
                           '"communication": 5}}', "c.json:2", "computation must be > 0"),
    ("capacity", "c.json", '{"1": {"computation": 2.0}}', "c.json:1", "missing field 'communication'"),
    ("capacity", "c.json", '{"1": {"computation": 2.0,\n\n "communication": }}', "c.json:3", "invalid JSON"),
    ("capacity", "c.pkl", pickle.dumps([1, 2]), "c.pkl", "maps client ids to records"),
    ("capacity", "c.pkl", pickle.dumps({1: _Evil()}), "c.pkl", "refusing to load"),
    ("capacity", "c.pkl", b"\x80\x04garbage", "c.pkl", "not a FedScale trace"),
    ("availability", "a.csv", "client_id,start_s,end_s\n1,5,5\n", "a.csv:2", "end 5 <= start 5"),
    ("availability", "a.csv", "client_id,start_s,end_s\n1,0,10\n2,0,1\n1,5,12\n", "a.csv:4",
     "[5, 12) overlaps [0, 10)"),
    ("availability", "a.csv", "client_id,start_s,end_s,period_s\n1,0,10,8\n", "a.csv:2", "ends after period_s 8"),
    ("availability", "a.csv", "client_id,start_s,end_s,period_s\n1,0,1,8\n1,2,3,9\n", "a.csv:3", "period_s differs"),
    ("availability", "a.csv", "client_id,start_s,end_s\n1,-3,1\n", "a.csv:2", "starts before 0"),
    ("availability", "a.json", '{"4": {"active": [0], "inactive": [5, 9, 12], "finish_time": 20}}', "a.json:1",
     "1 active times but 3 inactive times"),
    ("availability", "a.json", '{"4": {"active": [0, 4], "inactive": [5, 9], "finish_time": 20}}', "a.json:1",
     "overlaps"),
    ("availability", "a.json", '{"4": {"active": [0], "inactive": [5]}}', "a.json:1", "missing field 'finish_time'"),
]


@pytest.mark.parametrize("kind,name,content,where,what", BAD_TRACES,
                         ids=[f"{b[0]}-{b[1]}-{i}" for i, b in enumerate(BAD_TRACES)])
def test_bad_trace_files_name_file_and_line(tmp_path, kind, name, content, where, what):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    fmt = "csv" if name.endswith(".csv") else "fedscale"
    with pytest.raises(TraceError) as info:
        (load_capacity if kind == "capacity" else load_availability)(path, fmt)
    msg = str(info.value)
    assert f"{where}:" in msg and what in msg, msg


def test_mapping_modes():
    ids = [30, 4, 12, 7]
    assert map_clients(ids, 3, "first", None, "f") == [4, 7, 12]
    assert map_clients(ids, 6, "cycle", None, "f") == [4, 7, 12, 30, 4, 7]
    picked = map_clients(ids, 3, "random", stream(5, "x"), "f")
    order = sorted(ids)
    assert picked == [order[k] for k in stream(5, "x").choice(4, size=3, replace=False)]
    assert len(set(picked)) == 3
    with pytest.raises(TraceError, match=r"f: the trace has 4 clients but devices.count is 6; mapping 'first'.*cycle"):
        map_clients(ids, 6, "first", None, "f")
    with pytest.raises(TraceError, match="mapping 'random'"):
        map_clients(ids, 5, "random", stream(5, "x"), "f")


def test_availability_trace_config_maps_devices(tmp_path):
    write_availability_csv(tmp_path / "a.csv", AVAIL)
    cfg = AvailabilityTraceConfig.model_validate({"file": "a.csv", "mapping": "cycle"},
                                                 context={"scenario_dir": str(tmp_path)})
    assert cfg.format == "csv" and cfg.name == "trace"
    got = cfg.device_intervals(3, seed=0)
    assert got == {0: AVAIL[2], 1: AVAIL[7], 2: AVAIL[2]}
    assert got[1].as_array().tolist() == [[0.0, 10.5], [30.0, 45.0]]
    first = AvailabilityTraceConfig.model_validate({"file": "a.csv"}, context={"scenario_dir": str(tmp_path)})
    with pytest.raises(ConfigError) as info:
        first.device_intervals(3, seed=0, key="devices.availability")
    assert info.value.problems[0].path == "devices.availability" and "2 clients" in info.value.problems[0].message


# -- a scenario with a capacity trace -------------------------------------------------------------------

CSV = ("client_id,compute_ms_per_sample,uplink_kbps,downlink_kbps\n"
       "20,2.0,1000,4000\n"
       "10,0.5,250,500\n")


def trace_scenario(tmp_path: Path, trace: dict, count: int = 2, **extra) -> Path:
    raw = {**TINY, "devices": {**TINY["devices"], "count": count, "capacity_trace": trace},
           "data": {**TINY["data"], "dataset": {**TINY["data"]["dataset"], "num_samples": 120 * count}}, **extra}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_capacity_trace_gives_hand_computed_compute_and_transfer_times(tmp_path):
    (tmp_path / "cap.csv").write_text(CSV)
    path = trace_scenario(tmp_path, {"file": "cap.csv"})
    sc = load_scenario(path)
    b = build(sc, str(path))
    w, spec = b.world, train_spec(sc)
    assert w.samples.tolist() == [120, 120]
    # device 0 ← client 10 (sorted first): 1000 / (3 · 0.5) = 666.67 samples/s; device 1 ← client 20: 166.67
    assert w.speed_sps.tolist() == pytest.approx([1000 / 1.5, 1000 / 6.0], rel=1e-15)
    # 2 epochs × 120 samples = 240 samples: FedScale's 240 · 3 · computation / 1000 s
    assert w.compute_s(0, spec) == pytest.approx(240 * 3 * 0.5 / 1000, rel=1e-12)
    assert w.compute_s(1, spec) == pytest.approx(240 * 3 * 2.0 / 1000, rel=1e-12)
    kbits = w.model_bytes / 1024 * 8  # FedScale's model size
    assert w.upload_s(0) == pytest.approx(0.020 + kbits / 250, rel=1e-12)
    assert w.download_s(1) == pytest.approx(0.020 + kbits / 4000, rel=1e-12)
    assert w.uplink_mbps.tolist() == pytest.approx([250 * 1024 / 1e6, 1000 * 1024 / 1e6], rel=1e-15)
    # the same trace as a FedScale pickle (one bandwidth) gives the same compute speeds
    write_capacity_fedscale(tmp_path / "cap.pkl", {20: Capacity(2.0, 1000.0, 1000.0), 10: Capacity(0.5, 250.0, 250.0)})
    w2 = build(load_scenario(trace_scenario(tmp_path, {"file": "cap.pkl"}))).world
    assert np.array_equal(w2.speed_sps, w.speed_sps) and np.array_equal(w2.uplink_mbps, w.uplink_mbps)
    # FedAvg with every device: the first round ends at the slowest download + compute + upload
    out = run_scenario(sc, tmp_path / "run", source=str(path))
    first = next(json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
                 if json.loads(x)["event"] == "cloud_aggregate")
    expected = max(w.download_s(i) + w.compute_s(i, spec) + w.upload_s(i) for i in range(2))
    assert first["t"] == pytest.approx(expected, rel=1e-12)
    assert out.summary["status"] == "completed"


def test_capacity_trace_mapping_random_and_cycle(tmp_path):
    (tmp_path / "cap.csv").write_text(CSV)
    w = build(load_scenario(trace_scenario(tmp_path, {"file": "cap.csv", "mapping": "cycle"}, count=5))).world
    assert w.speed_sps.tolist() == pytest.approx([1000 / 1.5, 1000 / 6.0] * 2 + [1000 / 1.5])
    sc = load_scenario(trace_scenario(tmp_path, {"file": "cap.csv", "mapping": "random"}, count=2))
    w = build(sc).world
    clients = [[10, 20][k] for k in stream(sc.seed, "devices.capacity_trace").choice(2, size=2, replace=False)]
    assert w.speed_sps.tolist() == pytest.approx([1000 / (3 * {10: 0.5, 20: 2.0}[c]) for c in clients])


def test_capacity_trace_problems_at_load(tmp_path):
    (tmp_path / "cap.csv").write_text(CSV)
    with pytest.raises(ConfigError) as info:
        load_scenario(trace_scenario(tmp_path, {"file": "cap.csv"}, count=3))
    (p,) = info.value.problems
    assert p.path == "devices.capacity_trace.mapping" and "2 clients but devices.count is 3" in p.message
    assert "mapping: cycle" in p.message and "cap.csv" in p.message
    (tmp_path / "bad.csv").write_text(CSV + "30,0,1,1\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(trace_scenario(tmp_path, {"file": "bad.csv"}))
    (p,) = info.value.problems
    assert p.path == "devices.capacity_trace" and "bad.csv:4: compute_ms_per_sample must be > 0" in p.message
    with pytest.raises(ConfigError) as info:
        load_scenario(trace_scenario(tmp_path, {"file": "none.csv"}))
    assert "file not found: none.csv" in info.value.problems[0].message
    with pytest.raises(ConfigError) as info:
        load_scenario(trace_scenario(tmp_path, {"file": "cap.csv", "mapping": "sorted", "extra": 1}))
    assert {p.path for p in info.value.problems} == {"devices.capacity_trace.mapping", "devices.capacity_trace.extra"}


def test_shipped_example_traces_load():
    root = Path(__file__).resolve().parents[2] / "traces"
    caps = load_capacity(root / "example_device_capacity.csv", "csv")
    assert len(caps) == 24 and all(50 <= c.speed_sps <= 800 for c in caps.values())
    avail = load_availability(root / "example_availability.csv", "csv")
    assert len(avail) == 24 and all(a.period_s == 86400 and a.intervals for a in avail.values())
    assert not math.isnan(sum(e - s for a in avail.values() for s, e in a.intervals))
