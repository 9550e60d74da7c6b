"""pFedLA against the fake environment: the exact event trace of a few virtual seconds.

Fake rules (tests/fakeenv.py): a job on device d lasts 1 + 0.5·d s and returns ``model + d + 1``; a
transfer device ↔ server takes 0.25 s, edge ↔ cloud 0.5 s. The fake ``pfedla`` task returns
``trained + 10·client`` (so the personalised model shows whose it is) and lasts 0.75 s (flat) or
0.25 s (edges); the fake ``pfedla_mean`` returns 100 in 0.125 s.
"""

from hierfl.methods.pfedla.protocol import PFedLAConfig
from tests.fakeenv import FakeEnv, FakeWorld

FLAT = [
    (0.25, "train_start", "device=0"),
    (0.25, "train_start", "device=1"),
    (1.25, "train_done", "device=0"),
    # device 0's upload: one server job on (its trained model 1, the model it trained from 0), 1.5 → 2.25
    (1.5, "upload_done", "device=0"),
    (1.5, "tier", "cloud", 0, "run", "pfedla", [1.0, 0.0], 1.5, 2.25),
    (1.75, "train_done", "device=1"),
    # device 1's job waits in the cloud's FIFO until 2.25
    (2.0, "upload_done", "device=1"),
    (2.0, "tier", "cloud", 0, "run", "pfedla", [2.0, 0.0], 2.25, 3.0),
    (2.25, "personalised", "task='pfedla' outputs=(1.0,) stats={} start=1.5 end=2.25 payload=DeviceMsg(device=0)"),
    (2.25, "tier", "cloud", 0, "applied", [0], [1.0], [0], 1),
    (2.5, "train_start", "device=0"),  # its personalised model 1.0 arrived
    (3.0, "personalised", "task='pfedla' outputs=(12.0,) stats={} start=2.25 end=3.0 payload=DeviceMsg(device=1)"),
    (3.0, "tier", "cloud", 0, "applied", [1], [1.0], [0], 2),
    (3.25, "train_start", "device=1"),
    (3.5, "train_done", "device=0"),
    # device 0 trained from 1.0 → 2.0; the job gets (2.0, 1.0)
    (3.75, "upload_done", "device=0"),
    (3.75, "tier", "cloud", 0, "run", "pfedla", [2.0, 1.0], 3.75, 4.5),
    (4.5, "personalised", "task='pfedla' outputs=(2.0,) stats={} start=3.75 end=4.5 payload=DeviceMsg(device=0)"),
    (4.5, "tier", "cloud", 0, "applied", [0], [1.0], [0], 3),
]


def test_pfedla_flat_trace():
    env = FakeEnv(FakeWorld([10, 10]))
    env.server_tasks["pfedla"] = lambda xs, p: ([xs[0] + 10 * p["client"]], 0.75)
    assert env.run(PFedLAConfig().create(env), until=4.5) == FLAT


EDGES = [
    (0.25, "train_start", "device=0"),
    (0.25, "train_start", "device=1"),
    (0.25, "train_start", "device=2"),
    (1.25, "train_done", "device=0"),
    (1.5, "upload_done", "device=0"),
    (1.5, "tier", "edge", 0, "run", "pfedla", [1.0, 0.0], 1.5, 1.75),
    (1.75, "train_done", "device=1"),
    # edge 0 has one member: after each update it forms the mean of its store (cloud: average)
    (1.75, "personalised", "task='pfedla' outputs=(1.0,) stats={} start=1.5 end=1.75 payload=DeviceMsg(device=0)"),
    (1.75, "tier", "edge", 0, "applied", [0], [1.0], [0], 1),
    (1.75, "tier", "edge", 0, "run", "pfedla_mean", [0.0], 1.75, 1.875),
    (1.875, "edge_mean_ready",
     "task='pfedla_mean' outputs=(100.0,) stats={} start=1.75 end=1.875 payload=EdgeMeanMsg(edge=0)"),
    (2.0, "upload_done", "device=1"),
    (2.0, "tier", "edge", 1, "run", "pfedla", [2.0, 0.0], 2.0, 2.25),
    (2.0, "train_start", "device=0"),
    (2.25, "train_done", "device=2"),
    (2.25, "personalised", "task='pfedla' outputs=(2.0,) stats={} start=2.0 end=2.25 payload=DeviceMsg(device=1)"),
    (2.25, "tier", "edge", 1, "applied", [1], [1.0], [0], 1),
    # edge 0's mean reaches the cloud (1.875 + 0.5): the cloud's model, weighted by edge 0's one member
    (2.375, "edge_mean_arrived", "edge=0"),
    (2.375, "tier", "cloud", 0, "average", [100.0], [1.0], 100.0),
    (2.375, "tier", "cloud", 0, "applied", [0], [1.0], [0], 1),
    (2.5, "upload_done", "device=2"),
    (2.5, "tier", "edge", 1, "run", "pfedla", [3.0, 0.0], 2.5, 2.75),
    (2.5, "train_start", "device=1"),
    # device 2 is client 1 of edge 1: its personalised model 3 + 10
    (2.75, "personalised", "task='pfedla' outputs=(13.0,) stats={} start=2.5 end=2.75 payload=DeviceMsg(device=2)"),
    (2.75, "tier", "edge", 1, "applied", [2], [1.0], [0], 2),
    # edge 1 has two members: its mean after its second update
    (2.75, "tier", "edge", 1, "run", "pfedla_mean", [100.0], 2.75, 2.875),
    (2.875, "edge_mean_ready",
     "task='pfedla_mean' outputs=(100.0,) stats={} start=2.75 end=2.875 payload=EdgeMeanMsg(edge=1)"),
    (3.0, "train_done", "device=0"),
    (3.0, "train_start", "device=2"),
]


def test_pfedla_inside_edges_trace():
    env = FakeEnv(FakeWorld([10, 10, 10], edge_of=[0, 1, 1]))
    env.server_tasks["pfedla"] = lambda xs, p: ([xs[0] + 10 * p["client"]], 0.25)
    env.server_tasks["pfedla_mean"] = lambda xs, p: ([100.0], 0.125)
    protocol = PFedLAConfig(cloud="average").create(env)
    assert env.run(protocol, until=3.0) == EDGES
    assert env.global_model == 100.0
    # every device is evaluated with its own latest personalised model
    assert protocol.device_models() == {0: 1.0, 1: 2.0, 2: 13.0}
    assert protocol.party_models() is None  # the cloud's model is the one the eval lines test


def test_cloud_every_sets_how_often_an_edge_sends_its_mean():
    env = FakeEnv(FakeWorld([10, 10, 10], edge_of=[0, 1, 1]))
    env.server_tasks["pfedla"] = lambda xs, p: ([xs[0] + 10 * p["client"]], 0.25)
    env.server_tasks["pfedla_mean"] = lambda xs, p: ([100.0], 0.125)
    log = env.run(PFedLAConfig(cloud="average", cloud_every=1).create(env), until=3.0)
    means = [(line[0], line[3]) for line in log if line[1] == "tier" and line[4] == "run" and line[5] == "pfedla_mean"]
    # after every update: edge 0 at 1.75, edge 1 at 2.25 and 2.75 (the default waits for 2 updates at edge 1)
    assert means == [(1.75, 0), (2.25, 1), (2.75, 1)]


def test_eval_model_trained_tests_each_devices_latest_trained_model():
    env = FakeEnv(FakeWorld([10, 10, 10], edge_of=[0, 1, 1]))
    env.server_tasks["pfedla"] = lambda xs, p: ([xs[0] + 10 * p["client"]], 0.25)
    env.server_tasks["pfedla_mean"] = lambda xs, p: ([100.0], 0.125)
    protocol = PFedLAConfig(cloud="average", eval_model="trained").create(env)
    assert env.run(protocol, until=3.0) == EDGES
    # trained models 1, 2, 3 (EDGES: the first jobs' results), not the personalised 1, 2, 13
    assert protocol.device_models() == {0: 1.0, 1: 2.0, 2: 3.0}
