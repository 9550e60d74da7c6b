"""FedFTG in a hierarchy against the fake environment: HierFAVG's edge rounds, one fine-tuning job per
cloud round over the edge models, the cloud aggregation accounted at the job's end."""

import numpy as np

from hierfl.core.work import TrainSpec
from hierfl.methods.fedftg.protocol_hier import FedFTGHierConfig
from tests.fakeenv import FakeEnv, FakeWorld

# edge 0 = {0, 1}, edge 1 = {2, 3}; a job's model = start + d + 1; unit_s = 1 + 0.5·d per step (κ1 = 2 steps);
# device ↔ edge 0.25 s, edge ↔ cloud 0.5 s. The fake fine-tuning returns the weighted mean of the teachers
# plus 100 and takes 2 s.
SAMPLES = [16, 32, 16, 48]
COUNTS = np.array([[16, 0, 0], [0, 32, 0], [8, 8, 0], [0, 0, 48]])


def _run(**knobs):
    world = FakeWorld(SAMPLES, edge_of=[0, 0, 1, 1])
    world.num_classes = 3
    world.label_counts = COUNTS
    env = FakeEnv(world, rounds=2, spec=TrainSpec(epochs=None, steps=2))
    seen, sizes = [], []

    def finetune(inputs, params):
        seen.append((list(inputs), params))
        return [sum(w * x for w, x in zip(params["weights"], inputs)) / sum(params["weights"]) + 100.0], 2.0

    send = env.send

    def spy(src, dst, event, payload, name, *args, size=None, **kw):
        sizes.append((src[0], dst[0], size))
        return send(src, dst, event, payload, name, *args, size=size, **kw)

    env.server_tasks["fedftg"] = finetune
    env.send = spy
    log = env.run(FedFTGHierConfig(**{"kappa1": 2, "kappa2": 2, "fraction": 1.0, **knobs}).create(env))
    return env, log, seen, sizes


def test_one_job_per_cloud_round_over_the_edge_models():
    env, log, seen, sizes = _run()
    edge_models = [x[-1] for x in log if x[1] == "tier" and x[2] == "edge" and x[4] == "commit"]
    # κ2 = 2 edge rounds per cloud round and edge: 4 edge commits per cloud round
    assert len(edge_models) == 8
    runs = [x for x in log if x[1] == "tier" and x[4] == "run"]
    # cloud round 0 closes when edge 1's second model arrives at 11.5; the job runs 11.5 → 13.5
    assert [(x[0], x[5], x[7], x[8]) for x in runs] == [(11.5, "fedftg", 11.5, 13.5), (25.5, "fedftg", 25.5, 27.5)]
    # the teachers are the two edges' second models of the cycle, weighted by the edges' data (48, 64)
    e0, e1 = edge_models[2], edge_models[3]
    assert runs[0][6] == [e0, e1]
    assert seen[0][1]["weights"] == [48.0, 64.0]
    # an edge's histogram is the sum of its members'
    assert seen[0][1]["counts"] == [[16, 32, 0], [8, 8, 48]]
    # the cloud aggregation is accounted at the job's end; the fine-tuned model goes down
    commits = [(x[0], x[5]) for x in log if x[1] == "tier" and x[2] == "cloud" and x[4] == "commit"]
    assert commits == [(13.5, [0, 1]), (27.5, [0, 1])]
    downloads = [x[0] for x in log if x[1] == "edge_download_done"]
    assert downloads == [14.0, 14.0]
    starts = [x for x in log if x[1] == "train_start" and x[0] == 14.25]
    assert len(starts) == 4
    first = (48 * e0 + 64 * e1) / 112 + 100.0
    assert edge_models[4] == (16 * (first + 1) + 32 * (first + 2)) / 48  # edge 0 trained from the fine-tuned model
    e0b, e1b = edge_models[6], edge_models[7]
    assert env.global_model == (48 * e0b + 64 * e1b) / 112 + 100.0
    # histograms: each device's first upload to its edge and each edge's first upload carry 4·C = 12 bytes
    ups = [s for s in sizes if s[0] == "device" and s[1] == "edge"]
    assert [s[2] for s in ups[:4]] == [12] * 4 and all(s[2] == 0 for s in ups[4:])
    edge_ups = [s[2] for s in sizes if s[0] == "edge" and s[1] == "cloud"]
    assert edge_ups == [12, 12, None, None]


def test_every_round_histograms_ride_on_every_upload():
    _, _, _, sizes = _run(histograms="every_round")
    assert all(s[2] == 12 for s in sizes if s[1] in ("edge", "cloud") and s[0] != "cloud")


def test_fedftg_hier_needs_edge_servers_and_a_plain_trainer():
    import copy

    import pytest

    from hierfl.config.errors import ConfigError
    from hierfl.scenario.loader import validate_raw
    from tests.conftest import TINY

    raw = copy.deepcopy(TINY)
    raw["protocol"] = {"name": "fedftg_hier"}
    raw["training"]["trainer"] = "feddc"
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert {p.path for p in info.value.problems} >= {"topology.edge_servers", "training.trainer"}
    raw["topology"] = {"edge_servers": 2}
    raw["training"]["trainer"] = "sgd"
    assert validate_raw(raw).protocol.name == "fedftg_hier"


def test_at_edge_every_edge_round_is_fine_tuned_at_its_edge_server():
    _, log, seen, sizes = _run(at="edge")
    runs = [x for x in log if x[1] == "tier" and x[4] == "run"]
    # one job per edge round at that edge's server (its own queue), none at the cloud; edge 0's first
    # round closes at 3.5 over devices 0 (model 1) and 1 (model 2), edge 1's at 5.5 over 2 (3) and 3 (4)
    assert [(x[0], x[2], x[3], x[6], x[7], x[8]) for x in runs[:2]] == [
        (3.5, "edge", 0, [1.0, 2.0], 3.5, 5.5), (5.5, "edge", 1, [3.0, 4.0], 5.5, 7.5)]
    assert all(x[2] == "edge" for x in runs) and len(runs) == 8  # 2 edges × κ2 = 2 × 2 cloud rounds
    # the teachers' weights are the devices' samples, the histograms the devices' own
    assert seen[0][1]["weights"] == [16.0, 32.0] and seen[0][1]["counts"] == [[16, 0, 0], [0, 32, 0]]
    # the edge round closes (its aggregation accounted) at the job's end; its devices train from the
    # fine-tuned model (the fake job adds 100 to the mean (16·1 + 32·2)/48)
    assert (5.5, "tier", "edge", 0, "commit", [0, 1], 80 / 48) in log
    tuned = 80 / 48 + 100.0
    assert (8.0, "tier", "edge", 0, "add", tuned + 1, 16.0) in log
    # the edge's uploads to the cloud carry no histogram (the cloud does not fine-tune)
    assert [s[2] for s in sizes if s[0] == "edge" and s[1] == "cloud"] == [None] * 4
    # the seeds of the edges' generators come from ("generator_noise", edge, edge round)
    from hierfl.core.rng import stream

    assert seen[0][1]["noise_seed"] == int(stream(7, "generator_noise", 0, 0).integers(2 ** 62))
    assert seen[1][1]["noise_seed"] == int(stream(7, "generator_noise", 1, 0).integers(2 ** 62))


def test_at_edge_needs_gpu_edge_servers():
    import copy

    import pytest

    from hierfl.config.errors import ConfigError
    from hierfl.scenario.loader import validate_raw
    from tests.conftest import TINY

    raw = copy.deepcopy(TINY)
    raw.update(protocol={"name": "fedftg_hier", "at": "edge"}, topology={"edge_servers": 2})
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert [p.path for p in info.value.problems] == ["servers.edge.tier"]
    assert "allowed: edge_gpu" in str(info.value)
    raw["servers"] = {"edge": {"tier": "edge_gpu"}}
    assert validate_raw(raw).protocol.at == "edge"
    raw["servers"] = {"edge": {"gflops": 50}}
    assert validate_raw(raw).protocol.at == "edge"
