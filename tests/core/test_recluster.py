"""The re-clustering triggers as pure state machines (:mod:`hierfl.core.recluster`), on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.recluster import (AdaptivePolicy, EventPolicy, NeverPolicy, PeriodicPolicy, WorldSnapshot,
                                   match_labels, moved_devices, share_threshold)


def test_share_threshold_is_the_ceiling_of_share_times_k():
    assert [share_threshold(s, 4) for s in (0.1, 0.25, 0.26, 0.5, 1.0)] == [1, 1, 2, 2, 4]
    assert share_threshold(1 / 3, 3) == 1   # 1/3·3 is 1 up to rounding, not 2
    with pytest.raises(ValueError, match="share"):
        share_threshold(0.0, 3)


def test_moved_devices_lists_changed_groups_in_device_order():
    assert moved_devices(np.array([0, 0, 1, 1]), np.array([1, 0, 1, 0])) == {0: (0, 1), 3: (1, 0)}
    assert moved_devices(np.array([2, 2]), np.array([2, 2])) == {}
    with pytest.raises(ValueError, match="sizes"):
        moved_devices(np.array([0]), np.array([0, 1]))


def test_world_snapshot_names_each_kind_of_change():
    a = WorldSnapshot(np.array([1.0, 4.0]), np.array([0.5, 0.5]), np.array([True, True]))
    assert a.changes(a) == set()
    assert a.changes(WorldSnapshot(np.array([4.0, 4.0]), a.upload_s, a.online)) == {"slowdown"}
    assert a.changes(WorldSnapshot(a.compute_s, np.array([0.5, 2.0]), a.online)) == {"link"}
    assert a.changes(WorldSnapshot(a.compute_s, a.upload_s, np.array([True, False]))) == {"churn"}


def test_event_policy_fires_on_watched_changes_only():
    p = EventPolicy(("slowdown", "churn"))
    assert not p.world_changed({"link"}) and p.state() == {"changes": []}
    assert p.world_changed({"link", "churn"}) and p.state() == {"changes": ["churn"]}
    p.reset()
    assert p.state() == {"changes": []}
    with pytest.raises(ValueError, match="weather"):
        EventPolicy(("weather",))


def test_adaptive_flags_against_the_running_median_and_fires_at_the_threshold():
    p = AdaptivePolicy(gamma=1.5, k_tilde=2)
    # group 0: 2, 2, 4 s → median of (2, 2) = 2; 4 > 3 → flagged; group 1: 2, 2.9 s → 2.9 ≤ 3
    assert [p.round_closed(0, s) for s in (2.0, 2.0, 4.0)] == [False, False, True]
    assert [p.round_closed(1, s) for s in (2.0, 2.9)] == [False, False]
    assert not p.aggregation_applied(0, True)          # one flagged group of the two needed
    assert p.aggregation_applied(1, True)              # the second
    assert p.state() == {"flagged": [0, 1], "gamma": 1.5, "k_tilde": 2}


def test_periodic_and_never():
    p = PeriodicPolicy(3)
    assert [p.aggregation_applied(0, False) for _ in range(3)] == [False, False, True]
    p.reset()
    assert not p.aggregation_applied(0, False)
    n = NeverPolicy()
    assert n.static and not n.aggregation_applied(0, True) and not n.world_changed({"slowdown"})


def test_match_labels_renumbers_groups_to_move_the_fewest_devices():
    current = np.array([0, 0, 1, 1, 2, 2])
    # the same three groups, numbered by another rank: nobody needs to move
    assert match_labels(current, np.array([2, 2, 0, 0, 1, 1]), 3).tolist() == [0, 0, 1, 1, 2, 2]
    # device 1 joins the group of 2 and 3; group ids shifted by one: only device 1 moves
    assert match_labels(current, np.array([1, 2, 2, 2, 0, 0]), 3).tolist() == [0, 1, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="0..2"):
        match_labels(current, np.array([0, 0, 1, 1, 2, 3]), 3)


def test_adaptive_share_survives_a_resolved_config_and_sets_the_threshold():
    from hierfl.policies.recluster import AdaptiveRecluster  # noqa: PLC0415  (the config layer, above the core)
    cfg = AdaptiveRecluster(share=0.5)
    again = AdaptiveRecluster.model_validate(cfg.model_dump())
    assert again == cfg and again.make(4, 20).k_tilde == 2 and cfg.make(3, 20).k_tilde == 2   # ⌈0.5·4⌉, ⌈1.5⌉
    with pytest.raises(ValueError, match="not both"):
        AdaptiveRecluster(share=0.5, k_tilde=2)
