"""Settings a run would ignore or cap are refused: exit 2, the key path and what is allowed, no traceback.

Each case is a scenario that ran before, silently doing less than it says: edge servers no serverless
protocol uses, a device graph without edges under a protocol that mixes over them, a public subset, a
batch, a concurrency or a per-device sample count larger than what there is, knobs read only under
another key's value (PFNM's matching knobs under ``rule: average``), training keys a protocol's own
jobs never read. A default is never a setting; the no-collaboration arms' unread knobs are warnings.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hierfl.config.errors import ConfigError
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.badinput import assert_refused
from tests.conftest import TINY


def _raw(**override: Any) -> dict[str, Any]:
    return deep_merge(copy.deepcopy(TINY), override)


GRAPH = {"stop": {"virtual_time_s": 3.0}}
ADAM = {"training": {"lr": 0.01}}  # fccl steps Adam at protocol.lr: tiny's training.lr 0.1 would be refused
MLP = {"model": {"name": "mlp", "hidden": [6]}}
DOMAINS = {"data": {"dataset": {"name": "digits_domains", "domains": ["plain", "inverted"]},
                    "partition": {"name": "domains", "samples_per_device": 1_000_000_000}}}

# (scenario override, key path of the refusal, words the message must hold)
CASES: dict[str, tuple[dict[str, Any], str, tuple[str, ...]]] = {
    "dpsgd with edge servers": (
        {**GRAPH, "protocol": "dpsgd", "topology": {"edge_servers": 2, "device_graph": "ring"}},
        "topology.edge_servers", ("no servers", "allowed: 0")),
    "adpsgd with edge servers": (
        {**GRAPH, "protocol": "adpsgd", "topology": {"edge_servers": 1, "device_graph": "ring"}},
        "topology.edge_servers", ("allowed: 0",)),
    "dpsgd on an empty graph": (
        {**GRAPH, "protocol": "dpsgd", "topology": {"device_graph": "empty"}},
        "topology.device_graph.name", ("no edges", "allowed: ", "ring", "p2p")),
    "adpsgd on an empty graph": (
        {**GRAPH, "protocol": "adpsgd", "topology": {"device_graph": "empty"}},
        "topology.device_graph.name", ("no edges", "ring")),
    "fccl public_size above the public split": (
        {**ADAM, "data": {"public": {"size": 60, "labelled": False}},
         "protocol": {"name": "fccl", "public_size": 61, "public_batch_size": 10, "pretrain_epochs": 1}},
        "protocol.public_size", ("capped", "allowed: 1..60")),
    "fedmd align_size above the public split": (
        {"data": {"public": {"size": 60}}, "protocol": {"name": "fedmd", "align_size": 100}},
        "protocol.align_size", ("capped", "allowed: 1..60")),
    "rhfl align_size above the public split": (
        {"data": {"public": {"size": 60}}, "protocol": {"name": "rhfl", "align_size": 100}},
        "protocol.align_size", ("capped", "allowed: 1..60")),
    "fccl public_batch_size above the public subset": (
        {**ADAM, "data": {"public": {"size": 60, "labelled": False}},
         "protocol": {"name": "fccl", "public_size": 30, "public_batch_size": 40, "pretrain_epochs": 1}},
        "protocol.public_batch_size", ("capped", "allowed: 2..30")),
    "rhfl public_batch_size above the aligned samples": (
        {"data": {"public": {"size": 60}}, "protocol": {"name": "rhfl", "align_size": 50, "public_batch_size": 51}},
        "protocol.public_batch_size", ("capped", "allowed: 1..50")),
    "fccl training.lr (it steps Adam at protocol.lr)": (
        {"data": {"public": {"size": 60, "labelled": False}}, "protocol": {"name": "fccl", "pretrain_epochs": 1}},
        "training.lr", ("own optimizer", "allowed: its default")),
    "fccl training.momentum": (
        {"data": {"public": {"size": 60}}, "training": {"lr": 0.01, "momentum": 0.9}, "protocol": "fccl"},
        "training.momentum", ("own optimizer",)),
    "fedavgmeta fine-tuning without per-device evaluation": (
        {"training": {"trainer": {"name": "fedavgmeta", "inner_steps": 3}}}, "training.trainer.inner_steps",
        ("no device is evaluated", "data.local_test_fraction")),
    "feddc control_scope without edge servers": (
        {"training": {"trainer": {"name": "feddc", "control_scope": "cloud"}},
         "protocol": {"name": "fedavg", "weighting": "uniform"}}, "training.trainer.control_scope",
        ("no edge servers", "allowed: edge")),
    "domains samples_per_device above a share": (
        {**DOMAINS, "devices": {"count": 3}}, "data.partition.samples_per_device", ("capped", "allowed: 1..")),
    "fedbuff concurrency above the devices": (
        {"protocol": {"name": "fedbuff", "K": 2, "concurrency": 5}}, "protocol.concurrency",
        ("capped", "allowed: 1..4")),
    "fedasync concurrency above the devices": (
        {"protocol": {"name": "fedasync", "concurrency": 5}}, "protocol.concurrency", ("capped", "allowed: 1..4")),
    "fedbuff avg_staleness without normalize_staleness": (
        {"protocol": {"name": "fedbuff", "K": 2, "avg_staleness": 3}}, "protocol.avg_staleness",
        ("normalize_staleness: true", "ignored")),
    **{f"pfnm {key} under rule average": (
        {**MLP, "protocol": {"name": "pfnm", "rule": "average", key: value}},
        f"protocol.{key}", ("rule: match", "ignored"))
       for key, value in (("gamma", 3.0), ("sigma2", 2.0), ("sigma0_2", 2.0), ("iters", 1))},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_by_the_cli(tmp_path, capsys, case):
    override, key, _ = CASES[case]
    assert_refused(tmp_path, capsys, _raw(**override), key)


@pytest.mark.parametrize("case", sorted(c for c in CASES if "samples_per_device" not in c))  # known at load time
def test_refused_at_load_time_with_what_is_allowed(case):
    override, key, words = CASES[case]
    with pytest.raises(ConfigError) as info:
        validate_raw(_raw(**override))
    found = [p for p in info.value.problems if p.path == key]
    assert len(found) == 1, info.value.report()
    assert all(w in found[0].message for w in words), found[0].message
    if not key.startswith("training.trainer."):  # a declaration (not a trainer's own check): a sweep may skip it
        assert found[0].refused


@pytest.mark.parametrize(("override", "why"), [
    ({**GRAPH, "protocol": "p2p", "topology": {"device_graph": "empty"}}, "p2p's learning-alone baseline"),
    ({**GRAPH, "protocol": "dpsgd", "topology": {"device_graph": "ring"}}, "no edge servers"),
    ({"data": {"public": {"size": 60}}, "protocol": {"name": "fedmd", "align_size": 60}}, "the whole split"),
    ({"data": {"public": {"size": 60}}, "protocol": "fedmd"}, "the default 5000 is capped, as documented"),
    ({**MLP, "protocol": {"name": "pfnm", "rule": "match", "gamma": 3.0, "iters": 1}}, "read by the matching"),
    ({**MLP, "protocol": {"name": "pfnm", "rule": "average", "gamma": 7.0}}, "a default written out is not a setting"),
    ({"protocol": {"name": "fedbuff", "K": 2, "concurrency": 4}}, "every device at once"),
    ({"protocol": {"name": "fedbuff", "K": 2}}, "the default 100 is capped, as documented"),
    ({"training": {"trainer": {"name": "fedavgmeta", "inner_steps": 3}}, "data": {"local_test_fraction": 0.25}},
     "each device is fine-tuned before its own evaluation"),
    ({"protocol": {"name": "fedbuff", "K": 2, "normalize_staleness": True, "avg_staleness": 2}}, "read"),
])
def test_what_is_used_still_loads(override, why):
    assert validate_raw(_raw(**override)) is not None, why


def test_samples_per_device_at_the_smallest_share_builds():
    from hierfl.assemble import build

    raw = _raw(**DOMAINS, devices={"count": 3})
    raw["data"]["partition"]["samples_per_device"] = 40
    assert build(validate_raw(raw)).world.samples.tolist() == [40, 40, 40]


@pytest.mark.parametrize("override", [
    {**MLP, "protocol": {"name": "pfnm", "rule": "average"}},
    {"protocol": {"name": "fedbuff", "K": 2}},
    {"data": {"public": {"size": 60}}, "protocol": {"name": "fedmd", "collaborate": False}, **GRAPH},
], ids=["pfnm", "fedbuff", "fedmd"])
def test_a_resolved_scenario_loads_again(override):
    """A run's config.yaml writes every default out; none of them reads as a setting to refuse."""
    import yaml

    from hierfl.scenario.loader import dump_scenario

    scenario = validate_raw(_raw(**override))
    assert validate_raw(yaml.safe_load(dump_scenario(scenario))) == scenario


# the reference without collaboration is a sweep's arm over a collaborating base: its unread knobs are warned about
WARNED: dict[str, tuple[dict[str, Any], str]] = {
    "fccl lambda_col without collaboration": (
        {**GRAPH, **ADAM, "data": {"public": {"size": 60, "labelled": False}},
         "protocol": {"name": "fccl", "collaborate": False, "lambda_col": 0.1}},
        "protocol.lambda_col"),
    "fedmd digest_epochs without collaboration": (
        {**GRAPH, "data": {"public": {"size": 60}}, "protocol": {"name": "fedmd", "collaborate": False,
                                                                 "digest_epochs": 3}},
        "protocol.digest_epochs"),
    "rhfl eta without collaboration": (
        {**GRAPH, "data": {"public": {"size": 60}}, "protocol": {"name": "rhfl", "collaborate": False, "eta": 0.1}},
        "protocol.eta"),
}


@pytest.mark.parametrize("case", sorted(WARNED))
def test_warned_by_validate(tmp_path, capsys, case):
    import yaml

    from hierfl.cli import main
    from hierfl.scenario.checks import scenario_warnings

    override, key = WARNED[case]
    raw = _raw(**override)
    warnings = scenario_warnings(validate_raw(raw))
    assert len(warnings) == 1 and warnings[0].startswith(f"{key}: read only with collaborate: true"), warnings
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(path)]) == 0
    assert f"warning: {key}: " in capsys.readouterr().err
    raw["protocol"]["collaborate"] = True  # read: no warning
    assert not scenario_warnings(validate_raw(raw))


def test_run_prints_them_among_its_warnings():
    from hierfl.assemble import build
    from hierfl.driver.sanity import run_warnings

    scenario = validate_raw(_raw(**WARNED["fedmd digest_epochs without collaboration"][0]))
    assert any(w.startswith("protocol.digest_epochs: read only with") for w in run_warnings(scenario, build(scenario)))
