"""Devices in time: slowdown windows, availability models, tiers, straggler policies, bad input."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hierfl.assemble import build, tier_counts
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.core.dynamics import Availability, IntervalTimeline, MarkovTimeline, Window, finish_time
from hierfl.core.rng import stream
from hierfl.driver import run_scenario
from tests.conftest import TINY, tiny


def tiered(devices, **override):
    """The tiny scenario with its ``devices`` section replaced (tiers exclude the distributions)."""
    import copy

    from hierfl.scenario.loader import deep_merge, validate_raw

    raw = deep_merge(copy.deepcopy(TINY), override)
    raw["devices"] = devices
    return validate_raw(raw)

ROOT = Path(__file__).resolve().parents[2]


def lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


# -- pure pieces --------------------------------------------------------------------------------
def test_finish_time_integrates_slowdown_windows_exactly():
    w = [Window(5.0, 15.0, 10.0)]
    assert finish_time(0.0, 4.0, w) == 4.0                 # ends before the window
    assert finish_time(0.0, 10.0, w) == pytest.approx(19.0)  # 5 s, then 1 s of work in 10 s, then 4 s
    assert finish_time(20.0, 3.0, w) == 23.0               # after the window: unaffected
    assert finish_time(6.0, 0.5, w) == pytest.approx(11.0)   # entirely inside: 10× longer
    both = [Window(0.0, 10.0, 2.0), Window(0.0, 10.0, 3.0)]  # overlapping windows multiply
    assert finish_time(0.0, 1.0, both) == pytest.approx(6.0)


def test_markov_availability_statistics_match_the_model():
    up, down = 300.0, 100.0
    fractions, ups = [], []
    for d in range(200):
        m = MarkovTimeline(up, down, stream(1, "availability", d))
        ts = np.linspace(0, 20000, 2001)
        fractions.append(np.mean([m.is_up(t) for t in ts]))
        t = 0.0 if m.is_up(0.0) else m.next_change(0.0)
        for _ in range(20):
            end = m.next_change(t)
            ups.append(end - t)
            t = m.next_change(end)
    assert np.mean(fractions) == pytest.approx(up / (up + down), abs=0.02)
    assert np.mean(ups[:2000]) == pytest.approx(up, rel=0.08)


def test_interval_trace_wraps_around_its_period_and_leave_windows_cut_it():
    tl = IntervalTimeline([(0.0, 10.0), (30.0, 40.0)], period=40.0)
    assert tl.is_up(5) and not tl.is_up(15) and tl.is_up(75)
    assert tl.next_change(35.0) == 50.0                     # (30, 40) joins the next period's (40, 50)
    av = Availability([tl], [[(45.0, 60.0)]])
    assert not av.is_up(0, 46.0) and av.next_down(0, 35.0) == 45.0
    assert av.next_up(0, 46.0) == 70.0                      # away until 60, then the trace's next up period


def test_tier_counts_largest_remainder():
    assert tier_counts({"a": 0.4, "b": 0.3, "c": 0.3}, 10) == {"a": 4, "b": 3, "c": 3}
    assert tier_counts({"a": 1, "b": 1, "c": 1}, 10) == {"a": 4, "b": 3, "c": 3}
    assert sum(tier_counts({"a": 0.15, "b": 0.85}, 7).values()) == 7


def test_tiers_give_speed_from_gflops_and_model_flops():
    sc = tiered({"count": 10, "tiers": {"rpi4": 0.5, "phone_low": 0.5}}, model={"name": "mlp", "hidden": [8]})
    world = build(sc).world
    f_fwd = 2 * (5 * 8 + 8 * 3)
    tiers = list(world.tier)
    assert sorted(tiers) == ["phone_low"] * 5 + ["rpi4"] * 5
    for d, t in enumerate(tiers):
        gflops, up, down, rtt = (15, 48, 94, 10) if t == "rpi4" else (2, 6, 20, 50)
        assert world.speed_sps[d] == pytest.approx(gflops * 1e9 / (3 * f_fwd))
        assert (world.uplink_mbps[d], world.downlink_mbps[d], world.latency_ms[d]) == (up, down, rtt / 2)


# -- in the emulator --------------------------------------------------------------------------
def _job_times(run: Path) -> list[tuple[int, float, float]]:
    text = (run / "trace.json").read_text().rstrip().rstrip(",")
    events = json.loads(text + ("]" if not text.endswith("]") else ""))
    return [(e["tid"], e["ts"] / 1e6, e["dur"] / 1e6) for e in events if e.get("name") == "train"]


def test_slowdown_applies_only_inside_its_window(tmp_path):
    # 1 device, 4.8 s jobs; window [6, 7) 4× slower: only job 2 (starting at ≈ 6 s) overlaps it
    sc = tiny(devices={"count": 1}, stop={"rounds": 3}, evaluation={"every_s": None},
              events=[{"at_s": 6.0, "slowdown": {"select": {"ids": [0]}, "factor": 4.0, "for_s": 1.0}}])
    res = run_scenario(sc, tmp_path)
    base = 2 * 240 / 100.0
    w = [Window(6.0, 7.0, 4.0)]
    starts = []
    recs = [r for r in lines(tmp_path) if r["event"] == "cloud_aggregate"]
    assert len(recs) == 3
    # replay: each round = download + compute (integrated) + upload
    built = build(sc)
    down, up = built.world.download_s(0), built.world.upload_s(0)
    t = 0.0
    for r in recs:
        start = t + down
        starts.append(start)
        t = finish_time(start, base, w) + up
        assert r["t"] == pytest.approx(t, abs=1e-9)
    assert res.summary["totals"]["compute_s"] == pytest.approx(sum(finish_time(s, base, w) - s for s in starts))
    assert starts[0] + base < 6.0 and starts[1] < 7.0 < starts[2]  # only the second job overlaps the window
    assert finish_time(starts[1], base, w) - starts[1] == pytest.approx(base + 0.75)  # 1 s at 1/4 speed


def _four_speeds(policy, **kw):
    # devices 0..3 at 400, 200, 100, 50 samples/s; 60 samples, 1 epoch → 0.15, 0.3, 0.6, 1.2 s
    return tiny(devices={"count": 4, "speed_sps": {"dist": "choice", "values": [400]}}, straggler=policy,
                training={"epochs": 1}, stop={"rounds": 1}, evaluation={"every_s": None}, **kw)


def _with_speeds(sc, speeds):
    built = build(sc)
    built.world.speed_sps[:] = speeds
    return built


def test_deadline_drops_exactly_the_late_devices(tmp_path):
    sc = _four_speeds({"name": "deadline", "seconds": 0.5})
    built = _with_speeds(sc, [400, 200, 100, 50])
    res = run_scenario(sc, tmp_path, built=built)
    w = built.world
    arrive = [w.download_s(d) + 60 / s + w.upload_s(d) for d, s in enumerate([400, 200, 100, 50])]
    assert [a <= 0.5 for a in arrive] == [True, True, False, False]
    close = [r for r in lines(tmp_path) if r["event"] == "round_close"][0]
    assert close["dropped_ids"] == [2, 3] and close["arrived"] == 2 and close["t"] == pytest.approx(0.5)
    # devices 2 and 3 were still computing at the deadline: their compute so far is wasted
    wasted = (0.5 - w.download_s(2)) + (0.5 - w.download_s(3))
    assert close["wasted_compute_s"] == pytest.approx(wasted)
    assert res.summary["totals"]["stragglers_dropped"] == 2
    assert res.summary["totals"]["wasted_compute_s"] == pytest.approx(wasted)
    # the model is the sample-weighted average of the two on-time updates only
    agg = [r for r in lines(tmp_path) if r["event"] == "cloud_aggregate"][0]
    assert agg["participants"] == 2


def test_partial_deadline_trains_fewer_steps_and_keeps_everyone_who_fits(tmp_path):
    sc = _four_speeds({"name": "deadline", "seconds": 0.5, "partial": True})
    built = _with_speeds(sc, [400, 200, 100, 50])
    res = run_scenario(sc, tmp_path, built=built)
    w = built.world
    # 60 samples, batch 10 → 6 steps of 10 samples; steps that fit before the deadline minus an upload
    fits = [min(6, math.floor((0.5 - w.download_s(d) - w.upload_s(d)) / (10 / s) + 1e-9))
            for d, s in enumerate([400, 200, 100, 50])]
    assert fits[:2] == [6, 6] and 0 < fits[3] < fits[2] < 6
    close = [r for r in lines(tmp_path) if r["event"] == "round_close"][0]
    assert close["arrived"] == 4 and close["dropped"] == 0
    assert res.summary["totals"]["compute_s"] == pytest.approx(sum(f * 10 / s for f, s in zip(fits, [400, 200, 100, 50])))


def test_over_select_keeps_exactly_the_first_k(tmp_path):
    sc = _four_speeds({"name": "over_select", "factor": 2.0}, protocol={"fraction": 0.5})
    built = _with_speeds(sc, [400, 200, 100, 50])
    run_scenario(sc, tmp_path, built=built)
    close = [r for r in lines(tmp_path) if r["event"] == "round_close"][0]
    assert close["selected"] == 4 and close["arrived"] == 2 and close["dropped_ids"] == [2, 3]


def test_first_k_closes_on_the_kth_arrival(tmp_path):
    sc = _four_speeds({"name": "first_k", "k": 3})
    built = _with_speeds(sc, [400, 200, 100, 50])
    run_scenario(sc, tmp_path, built=built)
    w = built.world
    close = [r for r in lines(tmp_path) if r["event"] == "round_close"][0]
    assert close["dropped_ids"] == [3]
    assert close["t"] == pytest.approx(w.download_s(2) + 60 / 100 + w.upload_s(2))


def test_device_leaving_mid_job_is_not_waited_for(tmp_path):
    sc = _four_speeds({"name": "wait_all"}, events=[{"at_s": 0.5, "leave": {"select": {"ids": [3]}}}])
    built = _with_speeds(sc, [400, 200, 100, 50])
    res = run_scenario(sc, tmp_path, built=built)
    w = built.world
    recs = lines(tmp_path)
    lost = [r for r in recs if r["event"] == "device_lost"]
    assert [(r["device"], r["stage"], r["reason"]) for r in lost] == [(3, "train", "offline")]
    assert lost[0]["t"] == pytest.approx(0.5)
    close = [r for r in recs if r["event"] == "round_close"][0]
    assert close["arrived"] == 3 and close["lost"] == 1
    assert close["t"] == pytest.approx(w.download_s(2) + 60 / 100 + w.upload_s(2))
    assert res.summary["totals"]["wasted_compute_s"] == pytest.approx(0.5 - w.download_s(3))


def test_markov_churn_and_dropout_runs_and_counts_losses(tmp_path):
    sc = tiny(devices={"count": 8, "availability": {"name": "markov", "mean_up_s": 3.0, "mean_down_s": 2.0},
                       "dropout": 0.2},
              data={"dataset": {"num_samples": 480}}, protocol={"fraction": 0.5}, training={"epochs": 1},
              stop={"virtual_time_s": 30, "rounds": 100}, evaluation={"every_s": 5})
    res = run_scenario(sc, tmp_path)
    t = res.summary["totals"]
    assert t["devices_lost"] > 0 and t["cloud_aggregations"] > 3
    rows = (tmp_path / "devices.csv").read_text().splitlines()
    assert rows[0].split(",")[:2] == ["device", "tier"] and rows[1].split(",")[-2] == "markov"
    assert '"offline"' in (tmp_path / "trace.json").read_text()


DYN = dict(devices={"count": 6, "speed_sps": {"dist": "uniform", "low": 50, "high": 200},
                    "availability": {"name": "markov", "mean_up_s": 4.0, "mean_down_s": 1.0},
                    "dropout": 0.1, "jitter_sigma": 0.2},
           data={"dataset": {"num_samples": 360}},
           events=[{"at_s": 1.0, "slowdown": {"select": {"fraction": 0.5}, "factor": 5, "for_s": 3}},
                   {"at_s": 2.0, "link": {"select": {"count": 2}, "bandwidth_factor": 0.5, "for_s": 2}}],
           stop={"virtual_time_s": 12}, evaluation={"every_s": 2})


@pytest.mark.ray
@pytest.mark.parametrize("proto", [{"name": "fedavg", "fraction": 0.5},
                                   {"name": "hierfavg", "kappa1": 3, "kappa2": 2}, {"name": "fedasync", "concurrency": 3}])
def test_determinism_with_everything_on(tmp_path, ray_session, proto):
    from tests.determinism.test_determinism import metrics_without_wall

    extra = {"topology": {"edge_servers": 2}} if proto["name"] == "hierfavg" else {}
    strag = {"straggler": {"name": "deadline", "seconds": 2.0}} if proto["name"] != "fedasync" else {}
    local = run_scenario(tiny(protocol=proto, **DYN, **extra, **strag), tmp_path / "local")
    ray = run_scenario(tiny(protocol=proto, runtime={"executor": "ray", "workers": 2}, **DYN, **extra, **strag),
                       tmp_path / "ray")
    assert metrics_without_wall(tmp_path / "local") == metrics_without_wall(tmp_path / "ray")
    assert np.array_equal(local.final_params, ray.final_params)


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("override, path", [
    ({"devices": {"tiers": {"phone_mid": 1.0}}}, "devices.tiers.phone_mid"),
    ({"devices": {"tiers": {"rpi4": 1.0}, "speed_sps": 5}}, "devices"),
    ({"events": [{"at_s": 50.0, "slowdown": {"factor": 2}}], "stop": {"virtual_time_s": 10}}, "events.0.at_s"),
    ({"events": [{"at_s": 1.0, "slowdown": {"factor": 0}}]}, "events.0.slowdown.factor"),
    ({"events": [{"at_s": 1.0}]}, "events.0"),
    ({"events": [{"at_s": 1.0, "slowdown": {"factor": 2, "select": {"tier": "toaster"}}}]},
     "events.0.slowdown.select.tier"),
    ({"events": [{"at_s": 1.0, "link": {"uplink_mbps": -1}}]}, "events.0.link.uplink_mbps"),
    ({"devices": {"availability": {"name": "markov", "mean_up_s": 0, "mean_down_s": 1}}},
     "devices.availability.mean_up_s"),
    ({"devices": {"availability": "sometimes"}}, "devices.availability"),
    ({"straggler": {"name": "deadline"}}, "straggler.seconds"),
    ({"straggler": {"name": "over_select", "factor": 0.5}}, "straggler.factor"),
    ({"straggler": {"name": "deadline", "seconds": 1}, "protocol": {"name": "fedasync"}}, "straggler.name"),
    ({"devices": {"dropout": 1.5}}, "devices.dropout"),
])
def test_bad_dynamics_input_names_the_key(override, path):
    with pytest.raises(ConfigError) as err:
        if override.get("devices", {}).get("tiers") and "speed_sps" not in override["devices"]:
            tiered({"count": 4, **override["devices"]})
        else:
            tiny(**override)
    assert any(p.path == path for p in err.value.problems), [str(p) for p in err.value.problems]


def test_selector_matching_nothing_warns_and_cli_exits_2_on_bad_tier(tmp_path, capsys, monkeypatch):
    sc = tiered({"count": 4, "tiers": {"rpi4": 1.0}},
                events=[{"at_s": 1.0, "slowdown": {"factor": 2, "select": {"tier": "laptop"}}}])
    assert build(sc).dynamics.warnings == ["events.0.slowdown.select matches no device; the event does nothing"]
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "scenarios" / "churn.yaml").read_text().replace("phone_high", "phone_mid"))
    # the CLI in this process (the installed command's exit status: tests/scenario/test_config.py)
    monkeypatch.chdir(ROOT)
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "devices.tiers.phone_mid" in err and "Traceback" not in err
    assert "phone_low" in err  # the allowed tiers are listed
    assert not (tmp_path / "o").exists()


def test_selector_cluster_is_an_alias_of_edge_and_both_at_once_is_an_error():
    sc = tiny(devices={"count": 6}, topology={"edge_servers": 2},
              events=[{"at_s": 1.0, "slowdown": {"factor": 3, "select": {"cluster": 1}}}])
    assert sc.events[0].slowdown.select.edge == 1
    windows = build(sc).dynamics.windows
    # round_robin: edge 1 holds the odd devices; only they get the window
    assert [len(w) for w in windows] == [0, 1, 0, 1, 0, 1]
    with pytest.raises(ConfigError) as err:
        tiny(devices={"count": 6}, topology={"edge_servers": 2},
             events=[{"at_s": 1.0, "slowdown": {"factor": 3, "select": {"cluster": 1, "edge": 0}}}])
    assert "events.0.slowdown.select" in str(err.value) and "alias" in str(err.value)
