"""The golden comparison itself: each tolerance of the determinism contract, and readable diffs."""

from __future__ import annotations

import copy
import json

import pytest

from tests.golden import (
    LEARN_ABS,
    Difference,
    check_against_golden,
    compare,
    dumps,
    golden_path,
    kind_of,
    load_golden,
    report,
)

BASE = load_golden("quickstart")


def _changed(path: list, value) -> dict:  # noqa: ANN001
    """A copy of the quickstart's snapshot with the field at ``path`` set (or mapped by ``value``)."""
    return _changed_in(BASE, path, value)


def _fatal(diffs: list[Difference]) -> list[str]:
    return [d.path for d in diffs if d.fatal]


def test_a_snapshot_equals_itself():
    assert compare(BASE, copy.deepcopy(BASE)) == []


@pytest.mark.parametrize("rel, fails", [(5e-10, False), (5e-9, True), (1e-6, True)])
def test_emulated_times_are_held_to_1e9_relative(rel, fails):
    got = _changed(["summary", "virtual_time_s"], lambda t: t * (1 + rel))
    assert _fatal(compare(BASE, got)) == (["summary.virtual_time_s"] if fails else [])


def test_counts_and_ids_are_exact():
    got = _changed(["summary", "totals", "train_jobs"], lambda n: n + 1)
    assert _fatal(compare(BASE, got)) == ["summary.totals.train_jobs"]
    got = _changed(["clusters", "last", "leaders"], ["edge 0"])
    assert _fatal(compare(BASE, got)) == ["clusters.last.leaders[0]"]
    got = _changed(["metrics", "events"], lambda ev: {**ev, "eval": ev["eval"] + 1})
    assert _fatal(compare(BASE, got)) == ["metrics.events.eval"]


@pytest.mark.parametrize("delta, fails", [(0.5 * LEARN_ABS, False), (1.5 * LEARN_ABS, True)])
def test_accuracy_is_held_to_the_learning_tolerance(delta, fails):
    got = _changed(["summary", "final_accuracy"], lambda a: a + delta)
    assert _fatal(compare(BASE, got)) == (["summary.final_accuracy"] if fails else [])


def test_loss_and_model_norm_get_the_learning_tolerance_with_a_relative_part():
    loss = BASE["summary"]["final_loss"]
    ok = _changed(["summary", "final_loss"], loss + 0.01 + 0.01 * loss)
    bad = _changed(["summary", "final_loss"], loss + 0.03 + 0.03 * loss)
    assert _fatal(compare(BASE, ok)) == []
    assert _fatal(compare(BASE, bad)) == ["summary.final_loss"]
    assert kind_of("model.l2") == "learning" and kind_of("model.size") == "scenario"
    assert kind_of("metrics.eval[1].device_loss_mean") == "learning"
    assert kind_of("summary.robustness.tiers.cloud.dist_honest_mean_last") == "learning"
    assert kind_of("metrics.eval[1].t") == "scenario"


def test_list_lengths_and_missing_keys_are_reported():
    got = _changed(["metrics", "head"], lambda h: h[:-1])
    assert _fatal(compare(BASE, got)) == ["metrics.head (length)"]
    got = copy.deepcopy(BASE)
    del got["summary"]["rounds"]
    assert _fatal(compare(BASE, got)) == ["summary.rounds"]


def test_a_model_dependent_decision_that_differs_is_reported_and_only_learning_values_fail(tmp_path, monkeypatch):
    import tests.golden as golden

    # pretend the quickstart's grouping read model values, and that another machine grouped otherwise
    monkeypatch.setitem(golden.MODEL_DEPENDENT, "quickstart", ("clusters.last.members",))
    other = _changed(["clusters", "last", "members"], [[0, 1], list(range(2, 20))])
    other = _changed_in(other, ["summary", "virtual_time_s"], lambda t: t + 1.0)  # a path of its own
    monkeypatch.setattr(golden, "snapshot", lambda run_dir: other)
    diffs = check_against_golden("quickstart", tmp_path)
    assert {d.path for d in diffs} == {"clusters.last.members (length)", "summary.virtual_time_s"}
    assert not any(d.fatal for d in diffs)
    # but accuracy still has to agree within the learning tolerance
    worse = _changed_in(other, ["summary", "final_accuracy"], lambda a: a - 0.2)
    monkeypatch.setattr(golden, "snapshot", lambda run_dir: worse)
    assert _fatal(check_against_golden("quickstart", tmp_path)) == ["summary.final_accuracy"]


def _changed_in(snap: dict, path: list, value) -> dict:  # noqa: ANN001
    snap = copy.deepcopy(snap)
    node = snap
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value(node[path[-1]]) if callable(value) else value
    return snap


def test_the_report_names_each_field_with_both_values_and_the_rule():
    got = _changed(["summary", "totals", "train_jobs"], 21)
    text = report("quickstart", compare(BASE, got))
    assert text.splitlines()[0] == "quickstart: 1 field(s) differ beyond tolerance"
    assert "summary.totals.train_jobs: expected 20, got 21  [exact]" in text


def test_snapshots_are_stored_as_readable_text_that_round_trips():
    text = golden_path("quickstart").read_text(encoding="utf-8")
    assert json.loads(text) == BASE
    assert dumps(BASE) + "\n" == text  # the writer's own format: a re-recording diffs line by line
    assert max(len(line) for line in text.splitlines()) < 400


def test_measured_bytes_make_a_scenario_s_bytes_model_dependent(tmp_path, monkeypatch):
    """A scenario whose channel charges measured lengths (fedat_polyline: polyline, exact_bytes) declares its
    summary's byte counts model-dependent (the contract's MEASURED_BYTES_KEYS): another machine's other length
    and the later times that follow are reported, not failed; accuracy still has to agree. The same differences
    in a scenario of fixed lengths (fedat) fail."""
    import tests.golden as golden
    from hierfl.output.contract import MEASURED_BYTES_KEYS

    assert "channels.*.bytes" in MEASURED_BYTES_KEYS
    assert "summary.totals.bytes_*" in golden.model_dependent("fedat_polyline")
    assert not any("bytes" in p for p in golden.model_dependent("fedat"))
    for stem, fatal in (("fedat_polyline", False), ("fedat", True)):
        base = load_golden(stem)
        other = _changed_in(base, ["summary", "totals", "bytes_device_tier"], lambda b: b + 1)
        other = _changed_in(other, ["summary", "virtual_time_s"], lambda t: t + 1e-5)
        monkeypatch.setattr(golden, "snapshot", lambda run_dir, snap=other: snap)
        diffs = check_against_golden(stem, tmp_path)
        assert {d.path for d in diffs} == {"summary.totals.bytes_device_tier", "summary.virtual_time_s"}
        assert all(d.fatal == fatal for d in diffs)
    base = load_golden("fedat_polyline")
    worse = _changed_in(base, ["summary", "totals", "bytes_device_tier"], lambda b: b + 1)
    worse = _changed_in(worse, ["model", "l2"], lambda n: n * 2)
    monkeypatch.setattr(golden, "snapshot", lambda run_dir: worse)
    assert _fatal(check_against_golden("fedat_polyline", tmp_path)) == ["model.l2"]
