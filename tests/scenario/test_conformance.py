"""Conformance: every registered plug-in of every kind passes its kind's contract.

Each suite is parametrized over its registry's names, so a new plug-in is tested by adding it:
it is built from a minimal valid config (its class's ``example()``, or ``{name: …}`` with the
defaults), its hooks are checked against their contracts, and an unknown name is a
:class:`ConfigError` that lists every registered name. Nothing here pins a list of names.
"""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import hierfl.scenario  # noqa: F401  (assembles the schema: every plug-in is registered)
from hierfl.channels.rules import CHANNELS
from hierfl.assemble import build
from hierfl.config.errors import ConfigError
from hierfl.config.registry import Registry
from hierfl.core.dynamics import Availability, Dynamics
from hierfl.core.recluster import ReclusterPolicy
from hierfl.core.rng import stream
from hierfl.core.serveropt import OptState
from hierfl.core.work import TrainSpec
from hierfl.core.world import EdgeLink, World
from hierfl.data import DATASETS, PARTITIONERS, DataError, Dataset
from hierfl.devices import DISTRIBUTIONS
from hierfl.driver import run_scenario
from hierfl.dynamics import AVAILABILITY, EVENTS, DynamicsDraft, Facts
from hierfl.executors import EXECUTORS
from hierfl.learn.local import LocalTrainer, count_params, init_params
from hierfl.learn.serveropt import SERVER_OPTIMIZERS
from hierfl.learn.trainers import TRAINERS
from hierfl.models import MODELS, LogRegConfig
from hierfl.policies.recluster import RECLUSTER
from hierfl.policies.staleness import STALENESS
from hierfl.policies.straggler import STRAGGLERS
from hierfl.protocols import PROTOCOLS
from hierfl.robust.behaviours import BEHAVIORS
from hierfl.robust.rules import AGGREGATION_RULES
from hierfl.runtime.executor import RunData, make_executor
from hierfl.scenario.loader import deep_merge, validate_raw
from hierfl.subprotocol.config import SUBPROTOCOLS, RoundView, SubRound
from hierfl.topology import GENERATORS
from hierfl.topology.devgraph import DEVICE_GRAPHS
from hierfl.topology.generators import StarGenerator
from hierfl.topology.grouping import GROUPINGS, GroupingInputs
from tests.conftest import TINY, tiny
from tests.data.test_file_datasets import _WRITERS as DATASET_FILE_WRITERS

SEED = 11


def _raw(**override: Any) -> dict[str, Any]:
    return deep_merge(copy.deepcopy(TINY), override)


# -- unknown names: a ConfigError naming the key and every allowed name, for every kind ------------------

def _events_with(kind: str) -> dict[str, Any]:
    return {"events": [{"at_s": 0.5, kind: {}}]}


# kind → (registry, scenario override that names ``bogus`` where the kind is chosen, key of the problem)
UNKNOWN: dict[str, tuple[Registry, dict[str, Any], str]] = {
    "dataset": (DATASETS, {"data": {"dataset": {"name": "bogus"}}}, "data.dataset"),
    "partition": (PARTITIONERS, {"data": {"partition": "bogus"}}, "data.partition"),
    "model": (MODELS, {"model": "bogus"}, "model"),
    "protocol": (PROTOCOLS, {"protocol": "bogus"}, "protocol"),
    "trainer": (TRAINERS, {"training": {"trainer": "bogus"}}, "training.trainer"),
    "server optimizer": (SERVER_OPTIMIZERS, {"server_optimizer": {"cloud": "bogus"}}, "server_optimizer.cloud"),
    "staleness": (STALENESS, {"protocol": {"name": "fedasync", "staleness": "bogus"}}, "protocol.staleness"),
    "re-clustering": (RECLUSTER, {"protocol": {"name": "fedch", "recluster": "bogus"}}, "protocol.recluster"),
    "straggler policy": (STRAGGLERS, {"straggler": "bogus"}, "straggler"),
    "grouping": (GROUPINGS, {"topology": {"edge_servers": 2, "grouping": "bogus"}}, "topology.grouping"),
    "topology generator": (GENERATORS, {"topology": {"generator": "bogus"}}, "topology.generator"),
    "availability model": (AVAILABILITY, {"devices": {"availability": "bogus"}}, "devices.availability"),
    "event kind": (EVENTS, {"stop": {"virtual_time_s": 9.0}, **_events_with("bogus")}, "events.0"),
    "distribution": (DISTRIBUTIONS, {"devices": {"speed_sps": {"dist": "bogus"}}}, "devices.speed_sps"),
    "executor": (EXECUTORS, {"runtime": {"executor": "bogus"}}, "runtime.executor"),
    "aggregation rule": (AGGREGATION_RULES, {"aggregation": {"cloud": "bogus"}}, "aggregation.cloud"),
    "transfer channel": (CHANNELS, {"channels": {"device_uplink": "bogus"}}, "channels.device_uplink"),
    "device graph": (DEVICE_GRAPHS, {"topology": {"device_graph": "bogus"}}, "topology.device_graph"),
    "sub-protocol": (SUBPROTOCOLS, {"subprotocol": {"cloud": "bogus"}}, "subprotocol.cloud"),
    "device behavior": (BEHAVIORS, {"stop": {"virtual_time_s": 9.0},
                                    "events": [{"at_s": 0.5, "attack": {"behavior": "bogus"}}]},
                        "events.0.attack.behavior"),
}


@pytest.mark.parametrize("kind", sorted(UNKNOWN))
def test_unknown_name_lists_every_registered_name(kind):
    registry, override, key = UNKNOWN[kind]
    with pytest.raises(ConfigError) as info:
        validate_raw(_raw(**override))
    problems = [p for p in info.value.problems if p.path == key]
    assert problems, info.value.report()
    text = problems[0].message
    assert all(name in text for name in registry.names()), text


def test_every_registry_is_covered_by_the_unknown_name_suite():
    covered = {id(r) for r, _, _ in UNKNOWN.values()}
    missing = [r.kind for r in Registry.instances() if r.names() and id(r) not in covered]
    assert not missing, f"add these kinds to UNKNOWN (and a suite below): {missing}"


# -- datasets, partitions, models -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Dataset]:
    """Every registered dataset built from its example (file datasets on generated files)."""
    out = {}
    for name in DATASETS.names():
        cfg = DATASETS.example(name)
        if "root" in type(cfg).model_fields:  # files on disk: generate tiny ones in the real format
            assert name in DATASET_FILE_WRITERS, f"file dataset {name}: add a sample writer to tests/data/test_file_datasets.py"
            root = tmp_path_factory.mktemp(name)
            DATASET_FILE_WRITERS[name](root, SimpleNamespace(devices=SimpleNamespace(count=4),
                                                             data=SimpleNamespace(dataset=cfg)))
            sub = {k: None for k in ("train_samples", "test_samples") if k in type(cfg).model_fields}
            cfg = cfg.model_copy(update={"root": str(root), **sub})
        out[name] = cfg.build(4, stream(SEED, "data.dataset"))
    return out


@pytest.mark.parametrize("name", DATASETS.names())
def test_dataset(name, datasets):
    ds = datasets[name]
    assert ds.x_train.dtype == np.float32 and ds.x_train.ndim == 2 and len(ds.y_train) == len(ds.x_train) > 0
    assert math.prod(ds.input_shape) == ds.x_train.shape[1] == ds.x_test.shape[1] and len(ds.x_test) > 0
    assert ds.num_classes >= 2
    for y in (ds.y_train, ds.y_test):
        assert np.issubdtype(y.dtype, np.integer) and y.min() >= 0 and y.max() < ds.num_classes
    if ds.vocab_size is not None:
        assert ds.x_train.min() >= 0 and ds.x_train.max() < ds.vocab_size
    if ds.natural_groups is not None:
        assert len(ds.natural_groups) >= 4


@pytest.mark.parametrize("name", PARTITIONERS.names())
def test_partition_covers_every_sample_once(name, datasets):
    cfg = PARTITIONERS.example(name)
    usable = 0
    for ds in datasets.values():
        try:
            parts = cfg.split(ds, 4, stream(SEED, "data.partition"))
        except DataError:
            continue  # this partition does not apply to this dataset (e.g. natural needs users)
        usable += 1
        assert len(parts) == 4 and all(len(p) >= 1 for p in parts)
        joined = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
        assert len(np.unique(joined)) == len(joined) and joined.min() >= 0 and joined.max() < len(ds.y_train)
        if cfg.covers_all:
            assert len(joined) == len(ds.y_train)  # every sample, exactly once
        again = cfg.split(ds, 4, stream(SEED, "data.partition"))
        assert all(np.array_equal(a, b) for a, b in zip(parts, again))  # deterministic for a seed
    assert usable, f"partition {name} applies to no registered dataset"


@pytest.mark.parametrize("name", MODELS.names())
def test_model_forward_on_a_dataset_shape(name, datasets):
    import torch

    cfg = MODELS.example(name)
    fits = [ds for ds in datasets.values() if cfg.check_dataset(tuple(ds.input_shape), ds.vocab_size) is None]
    assert fits, f"model {name} accepts no registered dataset"
    ds = fits[0]
    shape = tuple(ds.input_shape)
    vec = init_params(cfg, shape, ds.num_classes, seed=SEED)
    assert vec.dtype == np.float32 and vec.shape == (count_params(cfg, shape, ds.num_classes),)
    assert np.array_equal(vec, init_params(cfg, shape, ds.num_classes, seed=SEED))
    module = cfg.build(shape, ds.num_classes)
    with torch.no_grad():
        out = module(torch.from_numpy(ds.x_train[:3]))
    assert tuple(out.shape) == (3, ds.num_classes) and bool(torch.isfinite(out).all())


# -- protocols: each runs a tiny scenario to its stop, locally -------------------------------------------

# a protocol runs in the first of these settings it accepts (its defaults may want edge servers or more devices)
SETTINGS = [{}, {"topology": {"edge_servers": 2}},
            {"devices": {"count": 12}, "data": {"dataset": {"num_samples": 720}}, "topology": {"edge_servers": 2}},
            {"topology": {"device_graph": {"name": "ring"}}, "stop": {"virtual_time_s": 3.0}},
            {"data": {"public": {"size": 40}}},  # output-exchange protocols (fedmd) need a public split
            {"data": {"public": {"size": 40}}, "training": {"lr": 0.01}},  # fccl refuses training.lr (Adam at its own lr)
            {"model": {"name": "mlp", "hidden": [6]}}]  # neuron matching (pfnm, fedma) needs an MLP


@pytest.mark.parametrize("name", PROTOCOLS.names())
def test_protocol_runs_a_tiny_scenario(name, tmp_path):
    example = PROTOCOLS.example(name).model_dump()
    errors = []
    for setting in SETTINGS:
        try:
            sc = validate_raw(_raw(**{"protocol": example, "stop": {"rounds": 2}, **setting}))
            break
        except ConfigError as exc:
            errors.append(exc.report())
    else:
        pytest.fail(f"protocol {name} accepts none of the tiny settings:\n" + "\n".join(errors))
    assert sc.protocol.check(sc) == []
    summary = run_scenario(sc, tmp_path).summary
    assert summary["status"] == "completed"
    if type(sc.protocol).serverless:  # no server, no rounds: peers train and mix until the time budget
        assert summary["rounds"] == 0 and summary["totals"]["train_jobs"] >= 4 and summary["totals"]["bytes_d2d"] > 0
    else:
        assert summary["rounds"] >= 1


# -- trainers and server optimizers: a step on a tiny vector ---------------------------------------------

X = np.array([[1.0, 0.5, -1.0], [0.0, 2.0, 1.0], [-1.5, 0.3, 0.2], [0.7, -0.4, 1.1]], dtype=np.float32)
Y = np.array([0, 2, 1, 2])


# the trainers that need a model feature (FedAlign: a slimmable final block; DisTrans: the dual input)
TRAINER_MODELS = {"fedalign": {"name": "mlp", "hidden": [4]},
                  "distrans": {"name": "dual_input", "features": 2, "backbone": {"name": "mlp", "hidden": [4]}}}


@pytest.mark.parametrize("name", TRAINERS.names())
def test_trainer_step(name):
    cfg = TRAINERS.example(name)
    # uniform FedAvg weights: every trainer accepts them (FedDC's default server rule requires them)
    scenario = tiny(training={"trainer": cfg.model_dump()}, protocol={"weighting": "uniform"},
                    model=TRAINER_MODELS.get(name, {"name": "logreg"}))
    assert cfg.layout.nbytes(10) >= 40 and scenario.training.trainer == cfg
    spec = TrainSpec(epochs=None, steps=2, batch_size=2, lr=0.1, **cfg.spec_fields())
    model = scenario.model
    trainer = LocalTrainer(model, (3,), 3)
    x0 = init_params(model, (3,), 3, seed=SEED)
    y1, stats = trainer.train(x0, X, Y, spec, seed=SEED)
    y2, _ = trainer.train(x0, X, Y, spec, seed=SEED)
    assert y1.dtype == np.float32 and y1.shape == x0.shape and np.isfinite(y1).all()
    assert np.array_equal(y1, y2) and not np.array_equal(y1, x0)
    assert isinstance(stats, dict)


@pytest.mark.parametrize("name", SERVER_OPTIMIZERS.names())
def test_server_optimizer_step(name):
    cfg = SERVER_OPTIMIZERS.example(name)
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    delta = np.array([0.1, 0.2, -0.3])
    state, again = OptState(), OptState()
    out = cfg.step(x, delta, state)
    assert out.dtype == np.float32 and out.shape == x.shape and np.isfinite(out).all() and state.steps == 1
    assert np.array_equal(out, cfg.step(x, delta, again))  # a pure function of (x, delta, state)
    np.testing.assert_allclose(cfg.step(x, np.zeros(3), OptState()), x, rtol=1e-7)  # no change, no move
    if cfg.plain_average:
        np.testing.assert_allclose(out, x + delta, rtol=1e-6)


# -- staleness functions and re-clustering policies ------------------------------------------------------

@pytest.mark.parametrize("name", STALENESS.names())
def test_staleness_function(name):
    sigma = STALENESS.example(name)
    values = [sigma(t) for t in range(0, 50)]
    assert values[0] == 1.0 and all(0.0 < v <= 1.0 for v in values)
    assert all(b <= a for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("name", RECLUSTER.names())
def test_recluster_policy(name):
    cfg = RECLUSTER.example(name)
    policy = cfg.make(3, 12)
    assert isinstance(policy, ReclusterPolicy)
    fired = []
    for r in range(30):
        for c in range(3):
            flag = policy.round_closed(c, 1.0 + (5.0 if r == 20 and c == 0 else 0.0))
            assert isinstance(flag, bool)
            fired.append(policy.aggregation_applied(c, flag))
    assert all(isinstance(f, bool) for f in fired) and isinstance(policy.state(), dict)
    assert policy.world_changed(set()) is False  # nothing changed: nothing to react to
    assert isinstance(policy.world_changed({"slowdown", "link", "churn"}), bool)
    assert policy.static == (not any(fired) and not policy.world_changed({"slowdown", "link", "churn"}))
    policy.reset()
    assert cfg.grouping is None and cfg.migration.in_flight == "finish" and cfg.migration.transfer


# every protocol that groups devices takes `protocol.recluster`; each policy runs in each, after a slowdown
REGROUPING = [n for n in PROTOCOLS.names() if "recluster" in PROTOCOLS.get(n).model_fields]


@pytest.mark.parametrize("policy", RECLUSTER.names())
@pytest.mark.parametrize("name", REGROUPING)
def test_recluster_policy_runs_in_every_grouping_protocol(name, policy, tmp_path):
    example = {**PROTOCOLS.example(name).model_dump(), "recluster": RECLUSTER.example(policy).model_dump()}
    if policy == "adaptive":
        example["recluster"]["k_tilde"] = 1
    slowdown = {"events": [{"at_s": 0.5, "slowdown": {"select": {"ids": [0]}, "factor": 8.0}}]}
    errors = []
    for setting in SETTINGS:
        try:
            sc = validate_raw(_raw(protocol=example, stop={"rounds": 4}, **slowdown, **setting))
            break
        except ConfigError as exc:
            errors.append(exc.report())
    else:
        pytest.fail(f"{name} with recluster {policy} accepts none of the tiny settings:\n" + "\n".join(errors))
    res = run_scenario(sc, tmp_path)
    assert res.summary["status"] == "completed"
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for rec in (x for x in lines if x["event"] == "regroup"):
        assert len(rec["moved"]) == len(rec["from_group"]) == len(rec["to_group"]) > 0
        assert rec["migration_bytes"] == res.summary["model_bytes"] * len(rec["moved"])  # everyone is online
    if policy == "never":
        assert not any(x["event"] in ("regroup", "recluster") for x in lines)


# -- topology generators and groupings --------------------------------------------------------------------

LINK = EdgeLink(100.0, 200.0, 5.0)


@pytest.mark.parametrize("name", GENERATORS.names())
def test_generator(name):
    cfg = GENERATORS.example(name)
    spec = cfg.generate(10, SEED, LINK)
    assert spec.num_edges == cfg.num_edges == len(spec.edge_links) >= 1
    assert spec == cfg.generate(10, SEED, LINK)


@pytest.mark.parametrize("name", DEVICE_GRAPHS.names())
def test_device_graph(name):
    cfg = DEVICE_GRAPHS.example(name)
    assert cfg.problems(6) == []
    graph = cfg.build(6, SEED)
    assert graph == cfg.build(6, SEED) and graph.n == 6  # deterministic for a seed
    assert all(0 <= i < j < 6 for i, j in graph.edges) and len(set(graph.edges)) == len(graph.edges)
    assert all(i in graph.neighbours[j] and j in graph.neighbours[i] for i, j in graph.edges)


def _grouping_inputs(n: int, seed: int) -> GroupingInputs:
    """Drawn devices and a generated topology (for the groupings that follow one)."""
    rng = np.random.default_rng(seed)
    spec = StarGenerator(edges=3).generate(n, seed, LINK)
    return GroupingInputs(samples=rng.integers(10, 100, n), speed_sps=rng.uniform(50, 500, n),
                          uplink_mbps=rng.uniform(1, 20, n), latency_ms=rng.uniform(5, 50, n),
                          edge_latency_ms=rng.uniform(0, 10, (n, spec.num_edges)), spec=spec, seed=seed)


@pytest.mark.parametrize("name", GROUPINGS.names())
def test_grouping_assigns_every_device_an_edge(name):
    cfg = GROUPINGS.example(name)
    inputs = _grouping_inputs(12, SEED)
    edge_of = cfg.assign(inputs)
    assert edge_of.shape == (12,) and np.issubdtype(edge_of.dtype, np.integer)
    assert edge_of.min() >= 0 and edge_of.max() < inputs.num_edges
    assert np.array_equal(edge_of, cfg.assign(_grouping_inputs(12, SEED)))  # deterministic for a seed


@pytest.mark.parametrize("name", GROUPINGS.names())
def test_grouping_builds_in_a_scenario(name):
    topology = {"grouping": name, **({"generator": {"name": "star", "edges": 2}}
                                     if GROUPINGS.get(name).needs_topology else {"edge_servers": 2})}
    world = build(tiny(topology=topology, protocol={"name": "hierfavg"})).world
    assert sorted(set(world.edge_of.tolist())) <= [0, 1] and len(world.edge_of) == 4


# -- straggler policies -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", STRAGGLERS.names())
def test_straggler_policy_hooks(name):
    policy = STRAGGLERS.example(name)
    for m in range(1, 12):
        k = policy.select_count(m)
        assert k >= m
        for selected in range(1, k + 1):
            assert 1 <= policy.needed(selected, m) <= selected
        if policy.waits_for_all:
            assert k == m and policy.needed(k, m) == k
    assert policy.deadline_s is None or policy.deadline_s > 0
    assert isinstance(policy.partial_work, bool) and (not policy.partial_work or policy.deadline_s is not None)
    assert not (policy.waits_for_all and policy.deadline_s is not None)


@pytest.mark.parametrize("name", STRAGGLERS.names())
def test_straggler_policy_in_a_scenario(name):
    policy = STRAGGLERS.example(name).model_dump()
    sc = tiny(straggler=policy, protocol={"name": "hierfavg"}, topology={"edge_servers": 2})
    assert sc.straggler.name == name and sc.straggler.cloud.waits_for_all
    cloud = {"straggler": {"name": "wait_all", "cloud": policy}, "protocol": {"name": "hierfavg"}, "topology": {"edge_servers": 2}}
    cloud_point = {p.key: p for p in PROTOCOLS.get("hierfavg").aggregation_points}["straggler.cloud"]
    if STRAGGLERS.example(name).refusal(cloud_point) is None:
        assert tiny(**cloud).straggler.cloud.name == name
    else:
        with pytest.raises(ConfigError):
            tiny(**cloud)


# -- availability models ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", AVAILABILITY.names())
def test_availability_model_is_consistent(name):
    cfg = AVAILABILITY.example(name)
    n = 6
    tiers = np.array(["custom"] * n, dtype=object)
    base = cfg.timelines(n, tiers, SEED)
    assert len(base) == n and (cfg.churn or all(t is None for t in base))
    labels = cfg.labels(base)
    assert len(labels) == n and all(isinstance(s, str) and s for s in labels)
    avail = Availability(base)
    for d in range(n):
        for t in np.linspace(0.0, 200_000.0, 41):
            if avail.is_up(d, t):
                assert avail.next_up(d, t) == t and avail.next_down(d, t) > t
            else:
                back = avail.next_up(d, t)
                assert back > t and (math.isinf(back) or avail.is_up(d, back))
    again = cfg.timelines(n, tiers, SEED)
    assert [Availability(again).is_up(d, 5000.0) for d in range(n)] == [avail.is_up(d, 5000.0) for d in range(n)]
    assert cfg.problems(n, ["custom"], "devices.availability") == []


# -- event kinds ------------------------------------------------------------------------------------------

def _tiny_world(n: int = 4, edges: int = 2) -> World:
    return World(samples=np.full(n, 10, dtype=np.int64), speed_sps=np.full(n, 100.0), uplink_mbps=np.full(n, 10.0),
                 downlink_mbps=np.full(n, 20.0), latency_ms=np.full(n, 5.0), edge_of=np.arange(n) % edges,
                 edge_latency_ms=np.zeros((n, edges)), edge_links=[LINK] * edges, model_bytes=1000,
                 tier=np.array(["custom"] * n, dtype=object))


@pytest.mark.parametrize("name", [cls.name for cls in EVENTS.classes()])
def test_event_kind_applies_to_a_tiny_world(name):
    cls = EVENTS.get(name)
    event = EVENTS.example(name) if hasattr(cls, "example") else cls()
    world = _tiny_world()
    assert event.problems(f"events.0.{name}", Facts(num_devices=4, num_edges=2, tiers=["custom"])) == []
    draft = DynamicsDraft(Dynamics.static(4), world, SEED)
    event.apply(1.0, 0, f"events.0.{name}", draft)
    dyn = draft.finish()
    assert len(dyn.windows) == 4 and len(dyn.availability.away) == 4
    if cls.takes_devices_offline:
        assert any(dyn.availability.away)
    # the same event in a scenario: validated and built
    raw = _raw(events=[{"at_s": 1.0, name: event.model_dump()}], stop={"virtual_time_s": 50.0},
               protocol={"name": "hierfavg"}, topology={"edge_servers": 2})
    built = build(validate_raw(raw))
    assert built.dynamics is not None


# -- Byzantine robustness: aggregation rules and device behaviours -----------------------------------------

@pytest.mark.parametrize("name", AGGREGATION_RULES.names())
def test_aggregation_rule_contract(name):
    """A rule maps m finite rows to one finite vector (within the rows' bounding box, except clipping),
    accepts at least one row, and an honest set with no spread aggregates to that point."""
    rule = AGGREGATION_RULES.example(name)
    rng = np.random.default_rng(SEED)
    V = rng.normal(size=(7, 5))
    base = np.zeros(5)
    loss = lambda x: float(np.sum((np.asarray(x) - 0.1) ** 2))  # noqa: E731
    out = rule.apply(V, np.ones(7), base, loss)
    assert out.aggregate.shape == (5,) and np.isfinite(out.aggregate).all()
    assert out.accepted.dtype == bool and out.accepted.shape == (7,)
    if not type(rule).asynchronous:
        assert out.accepted.any()
    if name != "norm_clip" and out.accepted.any():
        assert (out.aggregate >= V.min(axis=0) - 1e-9).all() and (out.aggregate <= V.max(axis=0) + 1e-9).all()
    same = np.tile(np.full(5, 0.05), (7, 1))
    assert np.allclose(rule.apply(same, np.ones(7), base, loss).aggregate, 0.05)


@pytest.mark.parametrize("name", BEHAVIORS.names())
def test_device_behavior_contract(name, tmp_path):
    """A behaviour returns a float32 vector of the update's shape, and runs in a scenario (timing unchanged)."""
    cfg = BEHAVIORS.example(name)
    v = np.arange(6, dtype=np.float32)
    out = cfg.transform(v, np.zeros(6, dtype=np.float32), np.random.default_rng(0))
    assert out.shape == v.shape and out.dtype == np.float32
    attack = [{"at_s": 0.0, "attack": {"select": {"ids": [0]}, "behavior": cfg.model_dump()}}]
    base = run_scenario(tiny(stop={"rounds": 1}), out_dir=tmp_path / "h", progress=False)
    # a NaN/Inf update under the plain mean makes the global model non-finite, and such a run ends
    # with status diverged (reliability): a rule that screens non-finite rows keeps it out instead
    screen = {} if np.isfinite(out).all() else {"aggregation": {"cloud": {"name": "geomed"}}}
    res = run_scenario(tiny(stop={"rounds": 1}, events=attack, **screen), out_dir=tmp_path / "b", progress=False)
    assert res.summary["virtual_time_s"] == base.summary["virtual_time_s"]
    assert res.summary["robustness"]["byzantine_jobs"] == {name: 1}


# -- distributions ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DISTRIBUTIONS.names())
def test_distribution_samples(name):
    dist = DISTRIBUTIONS.example(name)
    a = dist.sample(np.random.default_rng(SEED), 500)
    b = dist.sample(np.random.default_rng(SEED), 500)
    assert a.shape == (500,) and a.dtype == np.float64 and np.array_equal(a, b)
    assert np.all(a >= dist.lower_bound())
    sc = tiny(devices={"speed_sps": dist.model_dump()})
    assert type(sc.devices.speed_sps) is type(dist)


# -- executors --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", EXECUTORS.names())
def test_executor(name):
    cfg = EXECUTORS.example(name)
    assert tiny(runtime={"executor": name}).runtime.executor == name
    if not cfg.in_process:
        pytest.skip(f"{name} needs a cluster (covered by the Ray tests)")
    sc = tiny()
    b = build(sc)
    data = RunData(b.dataset.x_train, b.dataset.y_train, b.parts, b.dataset.x_test, b.dataset.y_test, b.init_params,
                   (sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes, 1), b.world.num_edges, b.spec)
    executor = make_executor(name, data)
    try:
        assert np.array_equal(executor.fetch(executor.initial_model()), b.init_params)
        acc, loss = executor.evaluate(executor.initial_model())
        assert 0.0 <= acc <= 1.0 and math.isfinite(loss)
    finally:
        executor.close()


def test_make_executor_lists_allowed_names():
    with pytest.raises(ValueError, match=", ".join(EXECUTORS.names())):
        make_executor("bogus", None)  # type: ignore[arg-type]


# -- sub-protocols: each plans well-formed rounds and runs at FedAvg's cloud --------------------------------

@pytest.mark.parametrize("name", [n for n in SUBPROTOCOLS.names() if n != "none"])
def test_subprotocol_plans_rounds_and_runs(name, tmp_path):
    cfg = SUBPROTOCOLS.example(name)
    for alive in (1, 2, 5):
        plans = []
        for r in range(64):
            plan = cfg.plan(RoundView(r, 5, alive, 5 - alive, 0, 1000, "cloud"))
            if plan is None:
                break
            plans.append(plan)
        assert plans and len(plans) < 64, "a sub-protocol has at least one round and ends"
        for plan in plans:
            assert isinstance(plan, SubRound) and plan.up_bytes >= 0 and plan.down_bytes >= 0
            assert min(plan.sender_flops, plan.sender_s, plan.server_flops, plan.server_s) >= 0
    assert 0 <= cfg.threshold(5) <= 5
    raw = cfg.model_dump(mode="json")
    if cfg.charges_sender_flops() and cfg.sender_gflops is None:
        raw["sender_gflops"] = 10.0
    out = tmp_path / "run"
    run_scenario(tiny(subprotocol={"cloud": raw}, stop={"rounds": 1}), out)
    totals = json.loads((out / "summary.json").read_text())["totals"]
    assert totals["subprotocol_runs"] >= 1 and totals["cloud_aggregations"] + totals.get("subprotocol_failed", 0) >= 1
