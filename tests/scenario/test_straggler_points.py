"""Conformance: every straggler policy at every policy key of every registered protocol.

A protocol declares its aggregation points (``aggregation_points``); a policy says why it would mean
nothing at one (``refusal``). For each protocol × key × policy this suite checks that the scenario
loader agrees with those declarations, that an accepted placement runs a tiny scenario and really
closes that point's rounds, and that a refused one is a clear error naming the key path and the
allowed values. A hand-written table pins the declarations themselves.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

import hierfl.scenario  # noqa: F401  (assembles the schema: every plug-in is registered)
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.driver import run_scenario
from hierfl.policies.straggler import POLICY_KEYS, STRAGGLERS
from hierfl.protocols import PROTOCOLS
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.conftest import TINY

# a protocol runs in the first of these settings it accepts (its defaults may want edge servers or more devices)
SETTINGS = [{}, {"topology": {"edge_servers": 2}},
            {"devices": {"count": 12}, "data": {"dataset": {"num_samples": 720}}, "topology": {"edge_servers": 2}},
            # serverless protocols need a device graph, and a time budget (no rounds)
            {"topology": {"device_graph": {"name": "ring"}}, "stop": {"rounds": None, "virtual_time_s": 20.0}},
            {"data": {"public": {"size": 40}}},  # output-exchange protocols (fedmd) need a public split
            {"data": {"public": {"size": 40}}, "training": {"lr": 0.01}},  # fccl refuses training.lr (Adam at its own lr)
            {"model": {"name": "mlp", "hidden": [6]}}]  # neuron matching (pfnm, fedma) needs an MLP


def _policies() -> list[tuple[str, dict[str, Any]]]:
    """Every registered policy's example, and its ``partial`` variants where it has that key."""
    out = []
    for name in STRAGGLERS.names():
        example = STRAGGLERS.example(name).model_dump()
        out.append((name, example))
        if "partial" in example:
            out.append((f"{name}+partial={not example['partial']}", {**example, "partial": not example["partial"]}))
    return out


POLICIES = _policies()
CASES = [(proto, key, label, cfg) for proto in PROTOCOLS.names() for key in POLICY_KEYS for label, cfg in POLICIES]


def _placed(key: str, cfg: dict[str, Any]) -> dict[str, Any]:
    return {"straggler": cfg} if key == "straggler" else {"straggler": {"name": "wait_all", "cloud": cfg}}


def _setting(proto: str) -> dict[str, Any]:
    """The first tiny setting ``proto`` accepts under ``wait_all``."""
    example = PROTOCOLS.example(proto).model_dump()
    for setting in SETTINGS:
        try:
            validate_raw(deep_merge(copy.deepcopy(TINY), {"protocol": example, **setting}))
            return {"protocol": example, **copy.deepcopy(setting)}
        except ConfigError:
            continue
    raise AssertionError(f"protocol {proto} accepts none of the tiny settings")


def _accepts(proto: str, key: str, cfg: dict[str, Any]) -> bool:
    """What the declarations say: the neutral policy anywhere, another only at a closable point that it fits."""
    policy = STRAGGLERS.get(cfg["name"]).model_validate(cfg)
    if policy.waits_for_all:
        return True
    point = {p.key: p for p in PROTOCOLS.get(proto).aggregation_points}.get(key)
    return point is not None and point.closable and policy.refusal(point) is None


@pytest.mark.slow
@pytest.mark.parametrize("proto,key,label,cfg", CASES, ids=[f"{p}-{k}-{lab}" for p, k, lab, _ in CASES])
def test_policy_at_point(proto, key, label, cfg, tmp_path):
    timing = {} if PROTOCOLS.get(proto).decides_on_models else {"training": {"trainer": "none"}}
    raw = deep_merge(copy.deepcopy(TINY), {**_setting(proto), **_placed(key, cfg), **timing,
                                          "stop": {"rounds": None, "virtual_time_s": 20.0},
                                          "evaluation": {"every_s": None}})
    if not _accepts(proto, key, cfg):
        with pytest.raises(ConfigError) as info:
            validate_raw(raw)
        problems = [p for p in info.value.problems if p.path == f"{key}.name"]
        assert problems, info.value.report()
        assert "allowed" in problems[0].message and "wait_all" in problems[0].message
        return
    sc = validate_raw(raw)
    summary = run_scenario(sc, tmp_path).summary
    assert summary["status"] == "completed"
    if cfg["name"] == "wait_all":
        return
    # the policy closed rounds at that point (its name on their round_close lines)
    closes = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"round_close"' in x]
    assert any(c["policy"] == cfg["name"] for c in closes), closes[:3]
    if proto == "hierfavg":  # the edge rounds take straggler, the cloud round straggler.cloud
        server = "edge" if key == "straggler" else "cloud"
        assert {c["server"] for c in closes if c["policy"] == cfg["name"]} == {server}


# which protocol takes which policy where, written out by hand (a change to a declaration shows here)
EXPECTED = {
    ("fedavg", "straggler"): {"wait_all", "deadline", "deadline+partial=True", "over_select", "first_k",
                              "random_epochs", "random_epochs+partial=False"},
    ("hierfavg", "straggler"): {"wait_all", "deadline", "deadline+partial=True", "over_select", "first_k",
                                "random_epochs", "random_epochs+partial=False"},
    ("hierfavg", "straggler.cloud"): {"wait_all", "deadline", "deadline+partial=True", "first_k"},
    ("fedat", "straggler"): {"wait_all", "deadline", "deadline+partial=True", "over_select", "first_k",
                             "random_epochs", "random_epochs+partial=False"},
    ("fedhisyn", "straggler"): {"wait_all", "deadline", "deadline+partial=True", "first_k"},
    ("fedftg", "straggler"): {"wait_all", "deadline", "deadline+partial=True", "over_select", "first_k",
                              "random_epochs", "random_epochs+partial=False"},
    ("fedftg_hier", "straggler"): {"wait_all", "deadline", "deadline+partial=True", "over_select", "first_k",
                                   "random_epochs", "random_epochs+partial=False"},
    ("fedftg_hier", "straggler.cloud"): {"wait_all", "deadline", "deadline+partial=True", "first_k"},
    ("fedch", "straggler"): {"wait_all", "deadline", "deadline+partial=True", "over_select", "first_k",
                             "random_epochs", "random_epochs+partial=False"},
}


def test_the_table_of_accepted_placements():
    for proto in PROTOCOLS.names():
        for key in POLICY_KEYS:
            got = {label for label, cfg in POLICIES if _accepts(proto, key, cfg)}
            assert got == EXPECTED.get((proto, key), {"wait_all"}), (proto, key)


def test_every_protocol_declares_its_points():
    for proto in PROTOCOLS.names():
        points = PROTOCOLS.get(proto).aggregation_points
        assert points, f"{proto} declares no aggregation point"
        assert len({p.key for p in points}) == len(points), f"{proto}: two points at one key"
        for p in points:
            assert p.closable or p.note or not p.synchronous, f"{proto} {p.flow}: say why it takes no policy"


def test_a_refused_placement_exits_2_from_the_cli(tmp_path, capsys):
    raw = deep_merge(copy.deepcopy(TINY), {"protocol": {"name": "hierfavg"}, "topology": {"edge_servers": 2},
                                          "straggler": {"name": "wait_all", "cloud": {"name": "over_select"}}})
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "straggler.cloud.name" in err and "edge→cloud" in err and "allowed there: deadline, first_k, wait_all" in err
    assert "Traceback" not in err
