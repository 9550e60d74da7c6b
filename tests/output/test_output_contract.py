"""Real run directories conform to the documented output contract (``hierfl/output/contract.py``).

The contract is what ``docs/reference/generated/outputs.md`` shows; here two short runs (flat
synchronous FedAvg, hierarchical asynchronous AHFL) are read back and every file, line, key and
column is checked against it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hierfl.driver import run_scenario
from hierfl.output import contract
from hierfl.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]
RUNS = {"quickstart": ["stop.virtual_time_s=12"], "ahfl": ["stop.virtual_time_s=15", "devices.count=20"]}
_PY = {"int": int, "float": (int, float), "str": str, "bool": bool, "list": list, "dict": dict}


def _allows(declared: str, value: object) -> bool:
    """Whether ``value`` fits a declared type written as text (``float | None``, ``list[int]``, …)."""
    alternatives = [a.strip() for a in declared.split("|")]
    if value is None:
        return "None" in alternatives or "null" in alternatives or "Any" in alternatives
    for alt in alternatives:
        base = alt.split("[")[0]
        if base == "Any" or (base in _PY and isinstance(value, _PY[base]) and not (base == "int" and isinstance(value, bool))):
            return True
        if base == "list" and isinstance(value, dict) and "count" in value:
            return True  # a long list written as its summary {count, min, max, mean} (output.list_limit)
    return False


@pytest.fixture(scope="module", params=sorted(RUNS))
def run_dir(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    sc = load_scenario(ROOT / "scenarios" / f"{request.param}.yaml", [*RUNS[request.param], "runtime.executor=local"])
    run_scenario(sc, out)
    return out


def test_every_contract_file_is_written(run_dir):
    for name in contract.FILES:
        assert (run_dir / name).is_file(), name


def test_summary_keys_are_documented(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["contract_version"] == contract.CONTRACT_VERSION
    assert set(summary) <= set(contract.SUMMARY_KEYS), set(summary) - set(contract.SUMMARY_KEYS)
    assert set(summary["totals"]) >= set(contract.EVAL_EXTRA)


def test_metrics_lines_follow_their_event(run_dir):
    events = contract.metric_events()
    seen = set()
    for raw in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        assert list(line)[:3] == list(contract.LINE_FIELDS), line
        spec = events.get(line["event"])
        assert spec is not None, f"undocumented event {line['event']!r}"
        seen.add(line["event"])
        for name, (declared, _unit) in spec["fields"].items():
            if name in spec["optional"] and name not in line:
                continue
            assert name in line, f"{line['event']}: missing {name}"
            assert _allows(declared, line[name]), f"{line['event']}.{name} = {line[name]!r} is not {declared}"
        extra = set(line) - set(contract.LINE_FIELDS) - set(spec["fields"])
        assert spec["open"] or not extra, f"{line['event']}: undocumented fields {extra}"
        if line["event"] == "eval":
            assert set(contract.EVAL_EXTRA) <= set(line)
    assert {"run_start", "eval", "run_end"} <= seen


def test_devices_csv_columns(run_dir):
    with open(run_dir / "devices.csv", newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    documented = list(contract.DEVICES_COLUMNS)
    assert header == [c for c in documented if c in header], header
    assert set(header) <= set(documented)


def test_clusters_lines(run_dir):
    for raw in (run_dir / "clusters.jsonl").read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        assert set(contract.CLUSTERS_FIELDS) <= set(line), line.keys()


def test_trace_is_chrome_trace_events(run_dir):
    trace = json.loads((run_dir / "trace.json").read_text(encoding="utf-8"))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert events and all("ph" in e for e in events)


def test_summary_values_have_their_documented_type(run_dir):
    # e.g. `events` is the count of engine events (an int), as the contract says
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    as_python = {"object": "dict", "null": "None"}
    wrong = []
    for key, value in summary.items():
        declared = "|".join(as_python.get(a.strip(), a.strip()) for a in contract.SUMMARY_KEYS[key][0].split("|"))
        if not _allows(declared, value):
            wrong.append(f"{key} = {value!r} is not {contract.SUMMARY_KEYS[key][0]}")
    assert not wrong, wrong
    assert isinstance(summary["events"], int)


def test_wall_clock_fields_are_labelled_wall_clock():
    # the unit rule (`*_s` = virtual seconds) knows the fields measured on the real clock
    assert contract.WALL_CLOCK_FIELDS == {"wall_s", "startup_s"}
    assert contract.metric_events()["run_start"]["fields"]["startup_s"][1] == "s (wall clock)"
    assert contract.unit_of("startup_s") == contract.unit_of("wall_s") == "s (wall clock)"
    assert contract.unit_of("time_to_target_s") == contract.unit_of("compute_s") == "s (virtual)"
    tables = (contract.LINE_FIELDS, contract.SUMMARY_KEYS, contract.EVAL_EXTRA, contract.DEVICES_COLUMNS,
              contract.CLUSTERS_FIELDS)
    for table in tables:  # every hand-written unit agrees with the rule where the name declares one
        for name, (_type, unit, _meaning) in table.items():
            if contract.unit_of(name) and _type != "object":
                assert unit == contract.unit_of(name), (name, unit)
