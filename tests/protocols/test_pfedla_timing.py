"""pFedLA in the real driver: job, upload, server job, download — exact virtual times by hand.

tiny's blobs (5 features, 3 classes) split iid over 3 devices: 80 samples each. logreg: P = 5·3 + 3 = 18
parameters, a model message is 72 bytes, F = 2·5·3 = 30 FLOPs per sample. Two custom tiers, no latency:

* ``slow`` (devices 0 and 1): 1000 FLOP/s, uplink 1000 B/s, downlink 2000 B/s;
* ``fast`` (device 2): 2000 FLOP/s, uplink 2000 B/s, downlink 4000 B/s.

One epoch with one batch of 80: a job is 80·3·30 FLOPs = 7.2 s slow, 3.6 s fast; a download takes 0.036 s
slow, 0.018 s fast; an upload 0.072 s slow, 0.036 s fast. The cloud computes at 1000 FLOP/s; the
hypernetworks have d_e = h = 2 and one head (logreg has one layer) over N = 3 clients:
F_hn = 2·(2·2 + 2·2² + 1·2·3) = 36, so a server job is 6·N·P + 4·F_hn = 324 + 144 = 468 FLOPs = 0.468 s.

* device 2: download 0 → 0.018, train → 3.618, upload → 3.654, server job 3.654 → 4.122 (cloud
  aggregation 1), download → 4.140, train → 7.740, upload → 7.776;
* devices 0 and 1: download → 0.036, train → 7.236, uploads → 7.308 together: device 0's job runs
  7.308 → 7.776 (aggregation 2), device 1's waits 0.468 s in the FIFO and runs 7.776 → 8.244 (3);
* device 2's second upload arrives at 7.776, queues behind device 1's job: 8.244 → 8.712 (4).
"""

from __future__ import annotations

import copy
import json

import pytest

from hierfl.assemble import build
from hierfl.config.errors import ConfigError
from hierfl.driver import run_scenario
from hierfl.scenario.loader import validate_raw
from tests.conftest import TINY

TIERS = {"slow": {"gflops": 1e-6, "uplink_mbps": 0.008, "downlink_mbps": 0.016, "rtt_ms": 0},
         "fast": {"gflops": 2e-6, "uplink_mbps": 0.016, "downlink_mbps": 0.032, "rtt_ms": 0}}


def _raw(**protocol):
    raw = copy.deepcopy(TINY)
    raw.update(devices={"count": 3, "tiers": {"slow": 2, "fast": 1}, "custom_tiers": TIERS},
               protocol={"name": "pfedla", "embed_dim": 2, "hidden_dim": 2, **protocol},
               servers={"cloud": {"gflops": 1e-6}}, training={"epochs": 1, "batch_size": 80}, stop={"rounds": 4})
    return raw


def _spans(out):
    trace = json.loads((out / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X"]


def test_server_jobs_queue_fifo_and_gate_the_downloads(tmp_path):
    sc = validate_raw(_raw())
    built = build(sc)
    assert built.world.tier.tolist() == ["slow", "slow", "fast"] and [len(p) for p in built.parts] == [80] * 3
    assert built.world.model_bytes == 72
    out = tmp_path / "run"
    summary = run_scenario(sc, out, built=built).summary
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    aggs = [x["t"] for x in lines if x["event"] == "cloud_aggregate"]
    assert aggs == pytest.approx([4.122, 7.776, 8.244, 8.712], abs=1e-9)
    jobs = [e for e in _spans(out) if e["name"] == "server_job:pfedla"]
    assert [e["ts"] / 1e6 for e in jobs] == pytest.approx([3.654, 7.308, 7.776, 8.244], abs=1e-9)
    assert [e["dur"] / 1e6 for e in jobs] == pytest.approx([0.468] * 4, abs=1e-9)
    assert [e["args"]["queued_s"] for e in jobs] == pytest.approx([0.0, 0.0, 0.468, 0.468], abs=1e-9)
    assert all(e["args"]["flops"] == 468.0 for e in jobs)
    # device 2's second job starts when its personalised model has arrived: 4.122 + 0.018
    trains = [e["ts"] / 1e6 for e in _spans(out) if e["name"] == "train" and e["args"]["job"] == 1]
    assert sorted(trains) == pytest.approx([4.140, 7.812, 8.280], abs=1e-9)
    assert summary["server_jobs"]["tasks"] == {"cloud": 4}
    # the store: 3 models of 18 floats + 3 hypernetworks of 2 + 4 + 2 + 4 + 2 + 4 + 2 + 6 + 3 = 29 floats
    assert summary["server_jobs"]["state_bytes"] == {"cloud": 4 * (3 * 18 + 3 * 29)}


def test_heur_pfedla_sends_only_the_layers_it_does_not_keep(tmp_path):
    # mlp [4]: layers of 5·4 + 4 = 24 and 4·3 + 3 = 15 floats, P = 39; k_keep = 1 keeps one of them
    raw = _raw(k_keep=1)
    raw["model"] = {"name": "mlp", "hidden": [4]}
    out = tmp_path / "run"
    run_scenario(validate_raw(raw), out)
    downloads = [e["args"]["bytes"] for e in _spans(out) if e["name"] == "download"]
    assert downloads[:3] == [156] * 3  # the first model is sent whole
    assert set(downloads[3:]) <= {4 * (39 - 24), 4 * (39 - 15)} and downloads[3:]


def test_bad_pfedla_settings_are_refused_with_their_key_paths():
    raw = _raw(cloud="average")
    raw["training"]["trainer"] = "fedprox"
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert sorted(p.path for p in info.value.problems) == ["protocol.cloud", "training.trainer"]
    raw = _raw()
    raw["topology"] = {"edge_servers": 1}
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert [p.path for p in info.value.problems] == ["stop.virtual_time_s"]
    with pytest.raises(ConfigError) as info:
        validate_raw(_raw(vjp_sign="plus"))
    assert "old_minus_new" in info.value.report()


def test_k_keep_beyond_the_models_layers_is_refused_at_build(tmp_path):
    from hierfl.assemble import build

    # logreg has one layer (weight and bias): k_keep 2 is refused; per tensor it has two units
    with pytest.raises(ConfigError) as info:
        build(validate_raw(_raw(k_keep=2)))
    assert [p.path for p in info.value.problems] == ["protocol.k_keep"]
    assert "allowed: 0..1" in info.value.report()
    build(validate_raw(_raw(k_keep=2, granularity="tensor")))


@pytest.mark.parametrize(("override", "expected"), [
    ({"protocol": {"cloud": "average"}}, ["protocol.cloud", "allowed without them: none"]),
    ({"protocol": {"k_keep": 3}}, ["protocol.k_keep", "allowed: 0..1"]),
    ({"protocol": {"granularity": "block"}}, ["granularity", "layer", "tensor"]),
    ({"protocol": {"cloud_every": 2}}, ["protocol.cloud_every", "allowed with cloud: none: null"]),
    ({"devices": {"availability": {"name": "markov", "mean_up_s": 5, "mean_down_s": 1}}}, ["availability"]),
])
def test_bad_input_exits_2_naming_the_key(tmp_path, capsys, override, expected):
    import yaml

    from hierfl.cli import main
    from hierfl.scenario.loader import deep_merge

    raw = deep_merge(_raw(), override)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err


def test_per_client_initial_models_cost_no_time_and_differ(tmp_path):
    """init: per_client: a pfedla_init job at t = 0 (not charged) draws every client's initial model; the
    timeline is the hand calculation's, the models are not the shared initial model's."""
    runs = {}
    for init in ("same", "per_client"):
        out = tmp_path / init
        summary = run_scenario(validate_raw(_raw(init=init)), out).summary
        lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert [x["t"] for x in lines if x["event"] == "cloud_aggregate"] == pytest.approx(
            [4.122, 7.776, 8.244, 8.712], abs=1e-9)
        runs[init] = (summary, [x for x in lines if x["event"] == "eval"])
    assert runs["per_client"][0]["server_jobs"]["tasks"] == {"cloud": 5}  # 1 init + 4 updates
    init_span = [e for e in _spans(tmp_path / "per_client") if e["name"] == "server_job:pfedla_init"]
    assert [(e["ts"], e["dur"]) for e in init_span] == [(0, 0)]
    assert runs["per_client"][0]["server_jobs"]["state_bytes"] == runs["same"][0]["server_jobs"]["state_bytes"]
    # the evaluation at t = 0 tests each client's own initial model: not the shared one's accuracy
    assert runs["per_client"][1][0]["accuracy"] != runs["same"][1][0]["accuracy"]
