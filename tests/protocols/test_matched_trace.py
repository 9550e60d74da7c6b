"""PFNM and FedMA against the fake environment: exact event traces by hand, specs and server-job params."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.mlp_layout import frozen_prefix
from hierfl.core.work import TrainSpec
from hierfl.methods.matched.protocol_fedma import FedMAConfig
from hierfl.methods.matched.protocol_pfnm import PFNMConfig
from tests.fakeenv import FakeEnv, FakeWorld

SHAPE = {"in_features": 3.0, "classes": 2.0, "layers": 1.0, "capacity0": 4.0}


def _env(samples: list[int], edge_of: list[int] | None = None, rounds: int = 1, match_s: float = 0.5) -> FakeEnv:
    world = FakeWorld(samples, edge_of)
    world.num_classes = 2
    world.label_counts = np.array([[d + 1, 1] for d in range(len(samples))])
    env = FakeEnv(world, spec=TrainSpec(epochs=1, lr=0.01), rounds=rounds)
    env.params = []  # (task, params) of every server job, in order

    def init(xs, params):
        env.params.append(("matched_init", params))
        return [0.0] * len(params["seeds"]), 0.0, SHAPE

    def mean(task, stats):
        def fn(xs, params):
            env.params.append((task, params))
            outs = [sum(xs) / len(xs)] * (len(xs) if task == "fedma_layer" else 1)
            return outs, match_s, stats
        return fn

    def submodels(xs, params):
        env.params.append(("matched_submodels", params))
        return xs * len(params["clients"]), 0.25, {f"width0.{i}": 3.0 for i in range(len(params["clients"]))}

    env.server_tasks.update({"matched_init": init, "pfnm_match": mean("pfnm_match", {"width0": 5.0}),
                             "matched_submodels": submodels,
                             "fedma_layer": mean("fedma_layer", {"width": 4.0}), "fedma_final": mean("fedma_final", {})})
    return env


def _trace(log: list[tuple]) -> list[tuple]:
    """The log without payload text: (t, kind) per event, and the aggregation / server-job calls."""
    out = []
    for line in log:
        if line[1] == "tier":
            out.append(line[:5] + tuple(line[5:]))
        else:
            out.append(line[:2])
    return out


def test_pfnm_flat_trace_later_rounds_from_the_global_model():
    # 3 devices, a job lasts 1, 1.5, 2 s and returns start + d + 1; transfers 0.25 s; a matching 0.5 s
    env = _env([10, 10, 10], rounds=2)
    protocol = PFNMConfig(local_width=[2], later_rounds="global").create(env)
    assert _trace(env.run(protocol)) == [
        (0.0, "tier", "cloud", 0, "run", "matched_init", [0.0], 0.0, 0.0),
        (0.0, "init_done"),
        (1.0, "local_done"), (1.25, "model_arrived"),
        (1.5, "local_done"), (1.75, "model_arrived"),
        (2.0, "local_done"), (2.25, "model_arrived"),
        (2.25, "tier", "cloud", 0, "run", "pfnm_match", [1.0, 2.0, 3.0], 2.25, 2.75),
        (2.75, "match_done"),
        (2.75, "tier", "cloud", 0, "add", 2.0, 1.0),
        (2.75, "tier", "cloud", 0, "commit", [0, 1, 2], 2.0),
        (3.0, "global_arrived"), (3.0, "global_arrived"), (3.0, "global_arrived"),
        (4.0, "local_done"), (4.25, "model_arrived"),
        (4.5, "local_done"), (4.75, "model_arrived"),
        (5.0, "local_done"), (5.25, "model_arrived"),
        (5.25, "tier", "cloud", 0, "run", "pfnm_match", [3.0, 4.0, 5.0], 5.25, 5.75),
        (5.75, "match_done"),
        (5.75, "tier", "cloud", 0, "add", 4.0, 1.0),
        (5.75, "tier", "cloud", 0, "commit", [0, 1, 2], 4.0),
    ]
    init = env.params[0][1]
    assert init["widths"] == [2] and len(set(init["seeds"])) == 3  # each device its own draw
    match = env.params[1][1]
    assert match["widths"] == [[2], [2], [2]] and match["counts"] == [[1, 1], [2, 1], [3, 1]]
    assert match["clients"] == [0, 1, 2] and match["rule"] == "match" and match["weights"] == [10, 10, 10]
    assert (match["gamma"], match["sigma2"], match["sigma0_2"], match["iters"]) == (7.0, 1.0, 1.0, 5)
    # round 2 starts from the global width the matching reported
    assert env.params[2][1]["widths"] == [[5], [5], [5]]
    assert protocol.model_bytes([5]) == 4 * (5 * 3 + 5 + 2 * 5 + 2)


def test_pfnm_flat_trace_later_rounds_from_each_devices_sub_network():
    # as above, but after the commit the cloud cuts the devices' sub-networks (0.25 s) before they go down,
    # and each device's download and next round have its own width (3, as the fake reports)
    env = _env([10, 10, 10], rounds=2)
    protocol = PFNMConfig(local_width=[2]).create(env)
    assert _trace(env.run(protocol))[11:] == [
        (2.75, "tier", "cloud", 0, "commit", [0, 1, 2], 2.0),
        (2.75, "tier", "cloud", 0, "run", "matched_submodels", [2.0], 2.75, 3.0),
        (3.0, "submodels_done"),
        (3.25, "global_arrived"), (3.25, "global_arrived"), (3.25, "global_arrived"),
        (4.25, "local_done"), (4.5, "model_arrived"),
        (4.75, "local_done"), (5.0, "model_arrived"),
        (5.25, "local_done"), (5.5, "model_arrived"),
        (5.5, "tier", "cloud", 0, "run", "pfnm_match", [3.0, 4.0, 5.0], 5.5, 6.0),
        (6.0, "match_done"),
        (6.0, "tier", "cloud", 0, "add", 4.0, 1.0),
        (6.0, "tier", "cloud", 0, "commit", [0, 1, 2], 4.0),
    ]
    cut = env.params[2][1]
    assert cut["clients"] == [0, 1, 2] and cut["widths"] == [5]  # the global width the matching reported
    assert env.params[3][1]["widths"] == [[3], [3], [3]]          # each device's own width in round 2


def test_pfnm_edges_later_rounds_cut_at_the_cloud_then_at_each_edge():
    env = _env([10, 10, 10, 10], edge_of=[0, 0, 1, 1], rounds=2)
    protocol = PFNMConfig().create(env)
    log = _trace(env.run(protocol))
    cuts = [line for line in log if len(line) > 5 and line[5] == "matched_submodels"]
    # the cloud cuts one sub-network per edge at the first commit (4.25), each edge one per member on arrival
    # (edge → cloud 0.5 s): 4.25 + 0.25 + 0.5 = 5.0
    assert cuts == [(4.25, "tier", "cloud", 0, "run", "matched_submodels", [2.5], 4.25, 4.5),
                    (5.0, "tier", "edge", 0, "run", "matched_submodels", [2.5], 5.0, 5.25),
                    (5.0, "tier", "edge", 1, "run", "matched_submodels", [2.5], 5.0, 5.25)]
    assert [p["clients"] for t, p in env.params if t == "matched_submodels"] == [[0, 1], [0, 1], [2, 3]]
    # devices download at 5.25 + 0.25 and start their round-2 jobs from the sub-networks (2.5)
    assert (5.5, "global_arrived") in log


def test_pfnm_shared_init_draws_one_seed():
    env = _env([10, 10])
    protocol = PFNMConfig(init="shared").create(env)
    protocol.start()
    seeds = env.params[0][1]["seeds"]
    assert len(seeds) == 2 and seeds[0] == seeds[1]


def test_pfnm_in_edges_then_cloud_trace():
    # devices 0, 1 behind edge 0 and 2, 3 behind edge 1; edge → cloud 0.5 s
    env = _env([10, 10, 10, 10], edge_of=[0, 0, 1, 1])
    protocol = PFNMConfig().create(env)
    assert _trace(env.run(protocol)) == [
        (0.0, "tier", "edge", 0, "run", "matched_init", [0.0], 0.0, 0.0),
        (0.0, "tier", "edge", 1, "run", "matched_init", [0.0], 0.0, 0.0),
        (0.0, "init_done"), (0.0, "init_done"),
        (1.0, "local_done"), (1.25, "model_arrived"),
        (1.5, "local_done"), (1.75, "model_arrived"),
        (1.75, "tier", "edge", 0, "run", "pfnm_match", [1.0, 2.0], 1.75, 2.25),
        (2.0, "local_done"), (2.25, "model_arrived"),
        (2.25, "match_done"),
        (2.25, "tier", "edge", 0, "aggregated", [0, 1]),
        (2.5, "local_done"),
        (2.75, "edge_model_arrived"),  # (sent at 2.25, before device 3's upload at 2.5)
        (2.75, "model_arrived"),
        (2.75, "tier", "edge", 1, "run", "pfnm_match", [3.0, 4.0], 2.75, 3.25),
        (3.25, "match_done"),
        (3.25, "tier", "edge", 1, "aggregated", [2, 3]),
        (3.75, "edge_model_arrived"),
        (3.75, "tier", "cloud", 0, "run", "pfnm_match", [1.5, 3.5], 3.75, 4.25),
        (4.25, "cloud_match_done"),
        (4.25, "tier", "cloud", 0, "add", 2.5, 1.0),
        (4.25, "tier", "cloud", 0, "commit", [0, 1], 2.5),
    ]
    cloud = env.params[-1][1]
    # each edge is one client: its members' summed class counts, its samples as weight, its matched width
    assert cloud["counts"] == [[3, 2], [7, 2]] and cloud["weights"] == [20, 20] and cloud["widths"] == [[5], [5]]
    assert cloud["clients"] == [0, 1]


def test_fedma_flat_trace_and_retrain_spec():
    # 2 devices, one hidden layer (capacity 4): train 1 epoch (1, 1.5 s); layer 0 matched 0.5 s; the output
    # layer alone is retrained 3 × retrain_epochs = 3 epochs (3, 4.5 s) at lr/10, weight decay 1e-4
    env = _env([10, 10])
    specs: list[tuple[float, int, TrainSpec | None]] = []
    start_job = env.start_job

    def spy(device, model, payload, spec=None, control=None, done="train_done", end=None):
        specs.append((env.now, device, spec))
        return start_job(device, model, payload, spec, control, done, end)

    env.start_job = spy
    protocol = FedMAConfig(retrain_epochs=1).create(env)
    assert _trace(env.run(protocol)) == [
        (0.0, "tier", "cloud", 0, "run", "matched_init", [0.0], 0.0, 0.0),
        (0.0, "init_done"),
        (1.0, "trained"), (1.25, "layer_arrived"),
        (1.5, "trained"), (1.75, "layer_arrived"),
        (1.75, "tier", "cloud", 0, "run", "fedma_layer", [1.0, 2.0], 1.75, 2.25),
        (2.25, "layer_matched"),
        (2.5, "global_layer_arrived"), (2.5, "global_layer_arrived"),
        (5.5, "trained"), (5.75, "layer_arrived"),
        (7.0, "trained"), (7.25, "layer_arrived"),
        (7.25, "tier", "cloud", 0, "run", "fedma_final", [2.5, 3.5], 7.25, 7.75),
        (7.75, "final_done"),
        (7.75, "tier", "cloud", 0, "add", 3.0, 1.0),
        (7.75, "tier", "cloud", 0, "commit", [0, 1], 3.0),
    ]
    assert [s for _, _, s in specs[:2]] == [None, None]  # round 0: the scenario's training
    retrain = specs[2][2]
    assert retrain.frozen == frozen_prefix(3, [4], 2, 1) == 16
    assert (retrain.epochs, retrain.lr, retrain.weight_decay) == (3, pytest.approx(0.001), 1e-4)
    layer = env.params[1][1]
    assert layer["layer"] == 0 and layer["widths"] == [[4], [4]] and layer["clients"] == [0, 1]
    final = env.params[2][1]
    assert final["widths"] == [4] and final["counts"] == [[1, 1], [2, 1]]
    # a sub-round's messages carry one layer: layer 0 is 4·(4·3 + 4) bytes, the output layer 4·(2·4 + 2)
    assert protocol.layer_bytes(0, [4]) == 64 and protocol.layer_bytes(1, [4]) == 40


def test_fedma_later_rounds_retrain_every_layer():
    env = _env([10, 10], rounds=2)
    protocol = FedMAConfig(retrain_epochs=2, retrain_lr=0.05).create(env)
    env.run(protocol)
    protocol.hidden, protocol.in_features = [4], 3
    spec = protocol.retrain_spec(0)
    assert (spec.frozen, spec.epochs, spec.lr) == (0, 2, 0.05)


def test_fedma_later_rounds_from_sub_networks_keep_each_devices_width():
    # later_rounds: submodel — after the first commit (7.75) the cloud cuts each device's sub-network
    # (0.25 s); the devices download them (0.25 s) and retrain every layer at their own width (3 here)
    env = _env([10, 10], rounds=2)
    protocol = FedMAConfig(retrain_epochs=1, later_rounds="submodel").create(env)
    log = _trace(env.run(protocol))
    assert (7.75, "tier", "cloud", 0, "run", "matched_submodels", [3.0], 7.75, 8.0) in log
    assert log.count((8.25, "global_arrived")) == 2
    layer = [p for t, p in env.params if t == "fedma_layer"][1]  # round 2's first sub-round
    assert layer["widths"] == [[3], [3]]
