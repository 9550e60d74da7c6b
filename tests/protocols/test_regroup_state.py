"""Per-device state when a device changes group (``protocol.recluster.migration.device_state``): ``keep``
(design default) moves FedDC's ``h_i, c_i`` with the device; ``reset`` forgets them, so the device starts
again from zeros in its new group — after every job it was given before, under either executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hierfl.runtime.executor as executor
from hierfl.driver import run_scenario
from tests.conftest import tiny


def _feddc_regroup(state: str, **kw: Any):  # noqa: ANN201
    """FedDC inside two edges of HierFAVG; at 0.5 s devices 0–2 slow down 8× and the groups are re-formed."""
    return tiny(devices={"count": 6, "speed_sps": 100}, data={"dataset": {"num_samples": 360}},
                topology={"edge_servers": 2, "grouping": "kmeans"},
                protocol={"name": "hierfavg", "kappa1": 2, "kappa2": 1, "fraction": 1.0, "weighting": "uniform",
                          "recluster": {"name": "on_event", "watch": ["slowdown"],
                                        "migration": {"device_state": state}}},
                training={"trainer": {"name": "feddc"}, "epochs": 1},
                events=[{"at_s": 0.5, "slowdown": {"select": {"ids": [0, 1, 2]}, "factor": 8}}],
                stop={"rounds": 4}, **kw)


def test_reset_forgets_the_moved_devices_state_and_only_theirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    seen: list[tuple[list[int], dict[int, list[str]], set[int]]] = []
    real = executor._LocalState.reset_devices

    def spy(self: Any, devices: list[int]) -> None:
        vectors = self._ex.host.states.vectors
        before = {d: sorted(vectors.get(d, {})) for d in range(6)}
        real(self, devices)
        seen.append((list(devices), before, set(vectors)))

    monkeypatch.setattr(executor._LocalState, "reset_devices", spy)
    s = run_scenario(_feddc_regroup("reset"), tmp_path / "reset").summary
    moved = int(s["totals"]["devices_migrated"])
    assert moved >= 1 and len(seen) == 1
    devices, before, after = seen[0]
    assert len(devices) == moved
    assert all(before[d] == ["c", "h"] for d in range(6))      # every device had trained: h_i and c_i
    assert after == set(range(6)) - set(devices)              # the moved ones' are gone, the others' kept
    # keep: the same run moves the same devices and never resets
    seen.clear()
    k = run_scenario(_feddc_regroup("keep"), tmp_path / "keep").summary
    assert seen == [] and k["totals"]["devices_migrated"] == moved
    assert k["final_loss"] != s["final_loss"]                 # the reset devices trained from zeros afterwards


def test_reset_is_the_same_bits_under_ray(tmp_path: Path, ray_session):
    local = run_scenario(_feddc_regroup("reset"), tmp_path / "local").summary
    ray = run_scenario(_feddc_regroup("reset", runtime={"executor": "ray", "workers": 2}), tmp_path / "ray").summary
    for key in ("final_accuracy", "final_loss", "virtual_time_s", "device_state"):
        assert ray[key] == local[key], key
    assert ray["totals"]["devices_migrated"] == local["totals"]["devices_migrated"]


def test_feddc_edge_weights_and_rules_follow_the_membership_after_regrouping(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    """FedDC's edge-scoped control weights κ_i = 1/N_e and each edge's drift rule over N_e devices are taken over
    an edge's members now, not over the topology's first assignment."""
    from hierfl.driver.aggregation import ControlVariates

    seen: list[tuple[list[int], list[float], dict[int, int]]] = []
    real = ControlVariates.regroup

    def spy(self: Any, edge_of: Any) -> None:
        real(self, edge_of)
        rules = self._round_rules
        members = {e: rules.at("edge", e).members for e in (0, 1)}
        seen.append(([int(e) for e in edge_of], [self.coef(d) for d in range(6)], members))

    monkeypatch.setattr(ControlVariates, "regroup", spy)
    s = run_scenario(_feddc_regroup("keep"), tmp_path / "keep").summary
    assert s["totals"]["devices_migrated"] > 0 and seen
    edge_of, coefs, members = seen[-1]
    for e in (0, 1):
        n_e = edge_of.count(e)
        assert members[e] == n_e
        assert all(coefs[d] == pytest.approx(1.0 / n_e) for d in range(6) if edge_of[d] == e)


def test_feddc_under_a_robust_rule_is_refused():
    from hierfl.config.errors import ConfigError

    with pytest.raises(ConfigError, match=r"aggregation\.cloud.*allowed: mean"):
        tiny(protocol={"name": "fedavg", "weighting": "uniform"}, training={"trainer": {"name": "feddc"}},
             aggregation={"cloud": {"name": "trimmed_mean", "beta": 0.1}})
