"""Topology files (YAML, GraphML) and generators: composed links, capacities, attachment, positions."""

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.assemble import build
from hierfl.config.errors import ConfigError
from hierfl.core.rng import stream
from hierfl.core.topomath import pairwise_km, uniform_square
from hierfl.scenario.loader import load_scenario
from hierfl.topology import GENERATORS, load_topology_file
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]

TWO_PATHS = """\
cloud: {name: dc, ingress_mbps: 900, egress_mbps: 1800}
edge_servers:
  - {name: e1, position_km: [0, 0], ingress_mbps: 100}
  - {name: e2, position_km: [10, 0], egress_mbps: 50}
routers: [{name: r}]
links:
  - {between: [e1, r], up_mbps: 200, down_mbps: 800, latency_ms: 2}
  - {between: [r, dc], bandwidth_mbps: 500, latency_ms: 10}
  - {between: [e2, dc], up_mbps: 100, down_mbps: 100, latency_ms: 30}
  - {between: [e2, r], bandwidth_mbps: 1000, latency_ms: 5}
"""


def scenario(tmp_path: Path, topology: dict, count: int = 4, text: str | None = None, name: str = "t.yaml",
             **extra) -> Path:
    """A tiny HierFAVG scenario next to a topology file (written when ``text`` is given)."""
    if text is not None:
        (tmp_path / name).write_text(text)
    raw = {**TINY, "devices": {**TINY["devices"], "count": count}, "topology": topology,
           "protocol": {"name": "hierfavg", "kappa1": 2}, "data": {**TINY["data"]}, **extra}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def world_of(path: Path, overrides=()):
    return build(load_scenario(path, overrides), str(path)).world


def test_yaml_file_composes_paths_and_fills_capacities(tmp_path):
    w = world_of(scenario(tmp_path, {"file": "t.yaml"}, text=TWO_PATHS))
    # e1 → r → dc: up min(200, 500), down min(800, 500), 2 + 10 ms;
    # e2: direct 30 ms loses to e2 → r → dc (5 + 10 = 15 ms), bandwidth min(1000, 500)
    assert [(lk.uplink_mbps, lk.downlink_mbps, lk.latency_ms) for lk in w.edge_links] == [(200, 500, 12), (500, 500, 15)]
    assert w.edge_names == ["e1", "e2"]
    assert w.edge_ingress_mbps.tolist() == [100, math.inf] and w.edge_egress_mbps.tolist() == [math.inf, 50]
    assert (w.cloud_ingress_mbps, w.cloud_egress_mbps) == (900, 1800)
    assert w.edge_xy.tolist() == [[0, 0], [10, 0]] and w.device_xy is None
    # no attachment rule and no placement in the file → round robin
    assert w.edge_of.tolist() == [0, 1, 0, 1]
    # edge → cloud transfer over the composed link: 12 ms + bytes·8 / 200 Mbit/s
    assert w.edge_upload_s(0) == pytest.approx(0.012 + w.model_bytes * 8 / 200e6, rel=1e-12)
    assert w.edge_download_s(1) == pytest.approx(0.015 + w.model_bytes * 8 / 500e6, rel=1e-12)


def test_loaded_scenario_takes_edge_count_and_grouping_from_the_file(tmp_path):
    sc = load_scenario(scenario(tmp_path, {"file": "t.yaml"}, text=TWO_PATHS))
    assert sc.topology.edge_servers == 2 and sc.topology.grouping == "topology"
    # the resolved scenario names the file absolutely, so a run's config.yaml works from anywhere
    assert sc.model_dump()["topology"]["file"] == str((tmp_path / "t.yaml").resolve())


def test_explicit_attachment(tmp_path):
    text = TWO_PATHS + 'devices:\n  explicit: {e1: ["0-1", 3], e2: [2]}\n'
    assert world_of(scenario(tmp_path, {"file": "t.yaml"}, text=text)).edge_of.tolist() == [0, 0, 1, 0]


REGIONS = """\
edge_servers:
  - {name: w1, region: west}
  - {name: c1, region: central}
  - {name: w2, region: west}
links:
  - {between: [w1, cloud], bandwidth_mbps: 100, latency_ms: 1}
  - {between: [w2, cloud], bandwidth_mbps: 100, latency_ms: 1}
  - {between: [c1, cloud], bandwidth_mbps: 100, latency_ms: 1}
devices:
"""


def test_region_shares_make_contiguous_blocks_balanced_over_the_regions_edges(tmp_path):
    text = REGIONS + "  regions: {west: 0.6, central: 0.4}\n"
    w = world_of(scenario(tmp_path, {"file": "t.yaml"}, count=10, text=text))
    # devices 0..5 west (edges w1 = 0, w2 = 2, alternating), 6..9 central (c1 = 1)
    assert w.edge_of.tolist() == [0, 2, 0, 2, 0, 2, 1, 1, 1, 1]


def test_region_lists(tmp_path):
    text = REGIONS + '  regions: {west: [0, "2-3"], central: [1, 4]}\n'
    w = world_of(scenario(tmp_path, {"file": "t.yaml"}, count=5, text=text))
    assert w.edge_of.tolist() == [0, 1, 2, 0, 1]


PLACED = """\
edge_servers:
  - {name: a, position_km: [0, 0]}
  - {name: b, position_km: [6, 6]}
  - {name: c, position_km: [0, 6]}
links:
  - {between: [a, cloud], bandwidth_mbps: 100, latency_ms: 1}
  - {between: [b, cloud], bandwidth_mbps: 100, latency_ms: 1}
  - {between: [c, cloud], bandwidth_mbps: 100, latency_ms: 1}
devices:
  placement: {area_km: 6, origin_km: [0, 0]}
  latency: {base_ms: 2.0, ms_per_km: 0.5}
"""


def test_placement_gives_seeded_positions_distance_latency_and_nearest_attachment(tmp_path):
    path = scenario(tmp_path, {"file": "t.yaml", "edge_latency_ms": 3.0}, count=30, text=PLACED)
    w = world_of(path)
    xy = uniform_square(stream(TINY["seed"], "topology.placement"), 30, 6.0)
    assert np.array_equal(w.device_xy, xy)
    dist = pairwise_km(xy, np.array([[0, 0], [6, 6], [0, 6]]))
    assert np.allclose(w.edge_latency_ms, 3.0 + 2.0 + 0.5 * dist)  # drawn + base + per km
    assert w.edge_of.tolist() == np.argmin(dist, axis=1).tolist()  # attach defaults to nearest
    assert set(w.edge_of.tolist()) == {0, 1, 2}


CAMPUS_LIKE = """<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="kind" for="node" attr.name="kind" attr.type="string"/>
  <key id="x" for="node" attr.name="x_km" attr.type="double"/>
  <key id="y" for="node" attr.name="y_km" attr.type="double"/>
  <key id="index" for="node" attr.name="index" attr.type="int"/>
  <key id="cap" for="node" attr.name="ingress_mbps" attr.type="double"/>
  <key id="bw" for="edge" attr.name="bandwidth_mbps" attr.type="double"/>
  <key id="up" for="edge" attr.name="up_mbps" attr.type="double"/>
  <key id="down" for="edge" attr.name="down_mbps" attr.type="double"/>
  <key id="lat" for="edge" attr.name="latency_ms" attr.type="double"/>
  <key id="mpk" for="graph" attr.name="latency_ms_per_km" attr.type="double"/>
  <key id="base" for="graph" attr.name="latency_base_ms" attr.type="double"/>
  <graph edgedefault="undirected">
    <data key="mpk">0.1</data>
    <data key="base">1.0</data>
    <node id="cloud"><data key="kind">cloud</data></node>
    <node id="r"><data key="kind">router</data></node>
    <node id="left"><data key="kind">edge</data><data key="x">0</data><data key="y">0</data><data key="cap">70</data></node>
    <node id="right"><data key="kind">edge</data><data key="x">10</data><data key="y">0</data></node>
    <edge source="cloud" target="r"><data key="bw">1000</data><data key="lat">8</data></edge>
    <edge source="r" target="left"><data key="up">100</data><data key="down">300</data><data key="lat">1</data></edge>
    <edge source="right" target="r"><data key="bw">2000</data><data key="lat">2.5</data></edge>
    <node id="d0"><data key="kind">device</data><data key="index">0</data><data key="x">1</data><data key="y">0</data></node>
    <node id="d1"><data key="kind">device</data><data key="index">1</data><data key="x">9</data><data key="y">0</data></node>
    <node id="d2"><data key="kind">device</data><data key="index">2</data><data key="x">4</data><data key="y">0</data></node>
    <node id="d3"><data key="kind">device</data><data key="index">3</data><data key="x">6</data><data key="y">3</data></node>
    <edge source="d0" target="right"><data key="lat">0.25</data></edge>
    <edge source="right" target="d1"/>
    <edge source="d2" target="right"/>
    <edge source="d3" target="left"/>
  </graph>
</graphml>
"""


def test_graphml_explicit_devices_pair_latency_and_composed_links(tmp_path):
    w = world_of(scenario(tmp_path, {"file": "c.graphml"}, text=CAMPUS_LIKE, name="c.graphml"))
    # "up" is toward the cloud whatever the edge's source/target order in the file
    assert [(lk.uplink_mbps, lk.downlink_mbps, lk.latency_ms) for lk in w.edge_links] == [(100, 300, 9), (1000, 1000, 10.5)]
    assert w.edge_names == ["left", "right"] and w.edge_ingress_mbps.tolist() == [70, math.inf]
    assert w.edge_of.tolist() == [1, 1, 1, 0]  # from the device nodes' links
    # distance latency 1 + 0.1·km, plus the d0 link's own 0.25 ms to its edge
    d = np.array([[1, 9], [9, 1], [4, 6], [math.hypot(6, 3), math.hypot(4, 3)]])
    expected = 1.0 + 0.1 * d
    expected[0, 1] += 0.25
    assert np.allclose(w.edge_latency_ms, expected)
    assert w.device_xy.tolist() == [[1, 0], [9, 0], [4, 0], [6, 3]]


def test_grouping_nearest_uses_the_files_positions(tmp_path):
    path = scenario(tmp_path, {"file": "c.graphml", "grouping": "nearest"}, text=CAMPUS_LIKE, name="c.graphml")
    # distances to (left, right): d0 1 | 9, d1 9 | 1, d2 4 | 6, d3 6.71 | 5 (d0's extra 0.25 ms does not flip it)
    assert world_of(path).edge_of.tolist() == [0, 1, 0, 1]
    # any other grouping also overrides the file's rule
    assert world_of(path, ["topology.grouping=round_robin"]).edge_of.tolist() == [0, 1, 0, 1]
    assert world_of(path, ["topology.grouping=topology"]).edge_of.tolist() == [1, 1, 1, 0]


def test_star_generator_uses_edge_cloud_and_capacities(tmp_path):
    gen = {"name": "star", "edges": 3, "edge_ingress_mbps": 40, "cloud_egress_mbps": 500}
    path = scenario(tmp_path, {"generator": gen, "edge_cloud": {"uplink_mbps": 80, "downlink_mbps": 90,
                                                                "latency_ms": 7}}, count=5)
    sc = load_scenario(path)
    assert sc.topology.edge_servers == 3 and sc.topology.grouping == "topology"
    w = build(sc).world
    assert [(lk.uplink_mbps, lk.downlink_mbps, lk.latency_ms) for lk in w.edge_links] == [(80, 90, 7)] * 3
    assert w.edge_of.tolist() == [0, 1, 2, 0, 1]
    assert w.edge_ingress_mbps.tolist() == [40] * 3 and w.edge_egress_mbps.tolist() == [math.inf] * 3
    assert (w.cloud_ingress_mbps, w.cloud_egress_mbps) == (math.inf, 500)


def test_tree_generator_composes_two_hops_and_splits_regions(tmp_path):
    gen = {"name": "tree", "regions": 2, "edges_per_region": 2,
           "edge_link": {"uplink_mbps": 100, "downlink_mbps": 400, "latency_ms": 3}}
    path = scenario(tmp_path, {"generator": gen, "edge_cloud": {"uplink_mbps": 1000, "downlink_mbps": 50,
                                                                "latency_ms": 20}}, count=6)
    w = world_of(path)
    # edge → aggregation (100 up / 400 down, 3 ms) then aggregation → cloud (edge_cloud: 1000 / 50, 20 ms)
    assert [(lk.uplink_mbps, lk.downlink_mbps, lk.latency_ms) for lk in w.edge_links] == [(100, 50, 23)] * 4
    assert w.edge_names == ["r0e0", "r0e1", "r1e0", "r1e1"]
    assert w.edge_of.tolist() == [0, 1, 0, 2, 3, 2]  # 3 devices per region, round robin inside
    uneven = world_of(path, ["topology.generator.region_shares=[0.25, 0.75]",
                             "topology.generator.region_link={uplink_mbps: 30, downlink_mbps: 60, latency_ms: 1}"])
    assert uneven.edge_of.tolist() == [0, 1, 2, 3, 2, 3]  # 1.5 | 4.5 devices: the tie goes to the first region
    assert (uneven.edge_links[0].uplink_mbps, uneven.edge_links[0].downlink_mbps, uneven.edge_links[0].latency_ms) \
        == (30, 60, 4)


def test_random_geometric_generator(tmp_path):
    gen = {"name": "random_geometric", "edges": 4, "area_km": 20, "base_ms": 1.0, "ms_per_km": 0.2}
    path = scenario(tmp_path, {"generator": gen, "edge_cloud": {"latency_ms": 10}}, count=25)
    w = world_of(path)
    rng = stream(TINY["seed"], "topology.generator")
    edge_xy = uniform_square(rng, 4, 20.0)
    device_xy = uniform_square(rng, 25, 20.0)
    assert np.array_equal(w.edge_xy, edge_xy) and np.array_equal(w.device_xy, device_xy)
    dist = pairwise_km(device_xy, edge_xy)
    assert np.allclose(w.edge_latency_ms, 1.0 + 0.2 * dist)
    assert w.edge_of.tolist() == np.argmin(dist, axis=1).tolist()
    to_cloud = pairwise_km(edge_xy, np.array([[10.0, 10.0]]))[:, 0]
    assert np.allclose([lk.latency_ms for lk in w.edge_links], 10 + 0.2 * to_cloud)
    other = world_of(path, ["seed=99"])
    assert not np.array_equal(other.device_xy, w.device_xy)


def test_shipped_topologies_load_with_the_documented_paths():
    metro = load_topology_file(ROOT / "topologies" / "metro-3edge.yaml")
    assert [e.name for e in metro.edges] == ["north", "centre", "south"] and metro.attach == "nearest"
    assert [(lk.uplink_mbps, lk.latency_ms) for lk in metro.edge_links] == [(1000, 20.5), (1000, 20.1), (500, 20.6)]
    tree = load_topology_file(ROOT / "topologies" / "regional-tree.yaml")
    assert [lk.latency_ms for lk in tree.edge_links] == [7, 8, 22, 24] and tree.edge_links[3].uplink_mbps == 200
    campus = load_topology_file(ROOT / "topologies" / "campus.graphml")
    assert campus.attach == "explicit" and len(campus.explicit) == 12 and campus.d2d.bandwidth_mbps == 100


# -- bad input ---------------------------------------------------------------------------------------

OK_EDGES = """\
edge_servers:
  - {name: a}
  - {name: b}
links:
  - {between: [a, cloud], bandwidth_mbps: 100, latency_ms: 5}
  - {between: [b, cloud], bandwidth_mbps: 100, latency_ms: 5}
"""

BAD_FILES = {
    "malformed-yaml": ("edge_servers:\n  - {name: a\nlinks: [\n", "t.yaml:3", "invalid YAML"),
    "not-a-mapping": ("- 1\n- 2\n", "t.yaml:1", "a topology file is a mapping"),
    "unknown-key": (OK_EDGES.replace("{name: b}", "{name: b, colour: red}"), "t.yaml:3", "edge_servers.1.colour: unknown key"),
    "zero-bandwidth": (OK_EDGES.replace("bandwidth_mbps: 100, latency_ms: 5}\n  - {between: [b",
                                        "bandwidth_mbps: 0, latency_ms: 5}\n  - {between: [b"),
                       "t.yaml:5", "links.0.bandwidth_mbps: Input should be greater than 0"),
    "negative-capacity": (OK_EDGES.replace("{name: a}", "{name: a, ingress_mbps: -5}"), "t.yaml:2",
                          "edge_servers.0.ingress_mbps"),
    "negative-latency": (OK_EDGES.replace("latency_ms: 5}\n  - {between: [b", "latency_ms: -1}\n  - {between: [b"),
                         "t.yaml:5", "latency_ms: Input should be greater than or equal to 0"),
    "half-asymmetric": (OK_EDGES.replace("bandwidth_mbps: 100, latency_ms: 5}\n  - {between: [b",
                                         "up_mbps: 100, latency_ms: 5}\n  - {between: [b"),
                        "t.yaml:5", "both up_mbps and down_mbps"),
    "disconnected": (OK_EDGES.replace("  - {between: [b, cloud], bandwidth_mbps: 100, latency_ms: 5}\n", ""),
                     "t.yaml:3", "edge server 'b' has no path to the cloud"),
    "unknown-node": (OK_EDGES.replace("[b, cloud]", "[b, clod]"), "t.yaml:6", "unknown node 'clod'"),
    "duplicate-name": (OK_EDGES.replace("{name: b}", "{name: a}"), "t.yaml:3", "duplicate node name 'a'"),
    "explicit-unknown-edge": (OK_EDGES + "devices:\n  explicit: {a: [0, 1], z: [2, 3]}\n", "t.yaml:8",
                              "unknown edge server 'z'"),
    "explicit-index-too-big": (OK_EDGES + 'devices:\n  explicit: {a: [0, 1], b: ["2-4"]}\n', "t.yaml:8",
                               "device index 4 does not exist: devices.count is 4"),
    "explicit-missing-device": (OK_EDGES + "devices:\n  explicit: {a: [0, 1], b: [3]}\n", "t.yaml:8",
                                "devices 2 are not attached"),
    "explicit-bad-range": (OK_EDGES + 'devices:\n  explicit: {a: ["3-1"], b: [0]}\n', "t.yaml:8",
                           "range 'a-b' with a <= b"),
    "region-unknown": (OK_EDGES + "devices:\n  regions: {north: 1.0}\n", "t.yaml:8", "no edge server has region 'north'"),
    "placement-needs-positions": (OK_EDGES + "devices:\n  placement: {area_km: 5}\n", "t.yaml:8",
                                  "position_km on every edge server"),
    "more-edges-than-devices": ("edge_servers: [{name: a}, {name: b}, {name: c}, {name: d}, {name: e}]\nlinks:\n"
                                + "".join(f"  - {{between: [{x}, cloud], bandwidth_mbps: 1, latency_ms: 1}}\n"
                                          for x in "abcde"), "t.yaml:1",
                                "5 edge servers but there are only 4 devices"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_topology_files_name_the_key_file_and_line(tmp_path, case):
    text, where, what = BAD_FILES[case]
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario(tmp_path, {"file": "t.yaml"}, text=text))
    problems = info.value.problems
    assert [p.path for p in problems] == ["topology.file"], info.value.report()
    assert f"{where}:" in problems[0].message and what in problems[0].message, problems[0].message


def _graphml(body: str) -> str:
    head = CAMPUS_LIKE.split("<graph edgedefault")[0]
    return head + '<graph edgedefault="undirected">\n' + body + "</graph>\n</graphml>\n"


GOOD_NODES = ('<node id="cloud"><data key="kind">cloud</data></node>\n'
              '<node id="e"><data key="kind">edge</data></node>\n')
BAD_GRAPHML = {
    "xml": ('<graphml><graph><node id="a"></graph>\n', "c.graphml:1", "invalid GraphML"),
    "no-kind": (_graphml(GOOD_NODES + '<node id="x"/>\n<edge source="e" target="cloud"><data key="bw">5</data>'
                                      '<data key="lat">1</data></edge>\n'), "c.graphml:17", "kind must be one of"),
    "two-clouds": (_graphml(GOOD_NODES + '<node id="c2"><data key="kind">cloud</data></node>\n'),
                   "c.graphml", "exactly one node with kind=cloud"),
    "disconnected": (_graphml(GOOD_NODES + '<node id="f"><data key="kind">edge</data></node>\n'
                                           '<edge source="e" target="cloud"><data key="bw">5</data>'
                                           '<data key="lat">1</data></edge>\n'),
                     "c.graphml:17", "edge server 'f' has no path to the cloud"),
    "unknown-attribute": (_graphml(GOOD_NODES.replace('<data key="kind">edge</data>',
                                                      '<data key="kind">edge</data><data key="index">3</data>')),
                          "c.graphml:16", "unknown attribute(s) ['index']"),
    "negative-bandwidth": (_graphml(GOOD_NODES + '<edge source="e" target="cloud"><data key="bw">-5</data>'
                                                 '<data key="lat">1</data></edge>\n'),
                           "c.graphml:17", "bandwidth_mbps: Input should be greater than 0"),
    "device-without-index": (_graphml(GOOD_NODES + '<node id="d"><data key="kind">device</data></node>\n'),
                             "c.graphml:17", "integer attribute index"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHML))
def test_bad_graphml_files(tmp_path, case):
    text, where, what = BAD_GRAPHML[case]
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario(tmp_path, {"file": "c.graphml"}, text=text, name="c.graphml"))
    p = info.value.problems[0]
    assert p.path == "topology.file" and f"{where}:" in p.message and what in p.message, p.message


def test_missing_file_unknown_type_and_inconsistent_keys(tmp_path):
    cases = [({"file": "nowhere.yaml"}, "topology.file", "file not found: nowhere.yaml"),
             ({"file": "t.txt"}, "topology.file", "unknown topology file type"),
             ({"file": "."}, "topology.file", "is a directory"),
             ({"file": "t.yaml", "edge_servers": 3}, "topology", "edge_servers is 3 but the topology file"),
             ({"file": "t.yaml", "generator": {"name": "star", "edges": 2}}, "topology", "not both"),
             ({"grouping": "topology", "edge_servers": 2}, "topology", "needs topology.file or topology.generator"),
             ({"generator": {"name": "star", "edges": 5}}, "topology.generator", "5 edge servers but there are only 4"),
             ({"generator": {"name": "tree", "regions": 2, "edges_per_region": 1, "region_shares": [0.5]}},
              "topology.generator", "region_shares needs 2 entries"),
             ({"generator": {"name": "ring", "edges": 2}}, "topology.generator",
              "allowed: " + ", ".join(GENERATORS.names()))]
    (tmp_path / "t.txt").write_text("x")
    for topology, key, what in cases:
        with pytest.raises(ConfigError) as info:
            load_scenario(scenario(tmp_path, topology, text=OK_EDGES))
        assert any(p.path == key and what in p.message for p in info.value.problems), (topology, info.value.report())


def test_cli_exits_2_without_traceback_and_runs_a_topology(tmp_path, capsys, monkeypatch):
    # in this process: the installed command's exit status is tests/scenario/test_config.py's
    from hierfl.cli import main

    bad = scenario(tmp_path, {"file": "t.yaml"}, text=OK_EDGES.replace("[b, cloud]", "[b, nowhere]"))
    monkeypatch.chdir(ROOT)
    assert main(["run", str(bad), "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "topology.file: " in err and "t.yaml:6: links.1.between: unknown node 'nowhere'" in err
    assert not (tmp_path / "o").exists()


def test_run_writes_a_config_that_runs_again_from_elsewhere(tmp_path, monkeypatch):
    from hierfl.driver import run_scenario

    path = scenario(tmp_path, {"file": "t.yaml"}, text=TWO_PATHS, stop={"rounds": 1})
    run_scenario(load_scenario(path), tmp_path / "run", source=str(path))
    monkeypatch.chdir(ROOT)
    again = load_scenario(tmp_path / "run" / "config.yaml")
    assert again.topology.edge_servers == 2 and again.topology.file == str((tmp_path / "t.yaml").resolve())


def test_relative_paths_resolve_against_the_scenario_then_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = scenario(tmp_path, {"file": "topologies/metro-3edge.yaml"}, count=6)  # not next to s.yaml: hierfl's copy
    assert load_scenario(path).topology.edge_servers == 3
    (tmp_path / "topologies").mkdir()
    (tmp_path / "topologies" / "metro-3edge.yaml").write_text(OK_EDGES)  # the scenario's folder wins
    assert load_scenario(path).topology.edge_servers == 2


@pytest.mark.ray
def test_topology_and_trace_runs_are_deterministic_local_vs_ray(tmp_path, ray_session):
    from hierfl.driver import run_scenario
    from tests.determinism.test_determinism import metrics_without_wall

    (tmp_path / "cap.csv").write_text("client_id,compute_ms_per_sample,uplink_kbps,downlink_kbps\n"
                                      "1,2.0,1000,4000\n2,0.5,250,500\n3,1.0,800,800\n")
    gen = {"name": "random_geometric", "edges": 2, "area_km": 5}
    path = scenario(tmp_path, {"generator": gen}, count=6, stop={"rounds": 2},
                    data={**TINY["data"], "partition": {"name": "dirichlet", "alpha": 0.5, "min_require_size": 5}})
    raw = yaml.safe_load(path.read_text())
    raw["devices"]["capacity_trace"] = {"file": "cap.csv", "mapping": "cycle"}
    path.write_text(yaml.safe_dump(raw))
    local = run_scenario(load_scenario(path), tmp_path / "local", source=str(path))
    again = run_scenario(load_scenario(path), tmp_path / "again", source=str(path))
    ray = run_scenario(load_scenario(path, ["runtime.executor=ray", "runtime.workers=2"]), tmp_path / "ray",
                       source=str(path))
    ref = metrics_without_wall(tmp_path / "local")
    assert metrics_without_wall(tmp_path / "again") == ref == metrics_without_wall(tmp_path / "ray")
    assert np.array_equal(local.final_params, ray.final_params) and np.array_equal(local.final_params,
                                                                                   again.final_params)
    assert (tmp_path / "local" / "devices.csv").read_text() == (tmp_path / "ray" / "devices.csv").read_text()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.lists(st.integers(1, 3), min_size=1, max_size=4),
       st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4))
def test_region_attachment_properties(n, edges_per_region, raw_shares):
    from hierfl.core.world import EdgeLink
    from hierfl.topology import TopologySpec, attach
    from hierfl.topology.spec import EdgeServer, RegionRule

    shares = np.array(raw_shares[:len(edges_per_region)]) + 1e-3
    shares = shares / shares.sum()
    edges, rules = [], []
    for r, k in enumerate(edges_per_region):
        ids = tuple(range(len(edges), len(edges) + k))
        edges.extend(EdgeServer(f"r{r}e{j}", region=f"r{r}") for j in range(k))
        rules.append(RegionRule(f"r{r}", ids, weight=float(shares[r])))
    spec = TopologySpec("test", tuple(edges), (EdgeLink(1, 1, 0),) * len(edges), (), attach="region",
                        regions=tuple(rules))
    if len(edges) > n:  # refused: more edge servers than devices
        with pytest.raises(ValueError, match="only"):
            attach(spec, n, np.zeros((n, len(edges))))
        return
    edge_of = attach(spec, n, np.zeros((n, len(edges))))
    for r, rule in enumerate(rules):
        in_region = np.isin(edge_of, rule.edges)
        assert abs(in_region.sum() - shares[r] * n) < 1.0 + 1e-9  # largest remainder: within one device
        counts = np.bincount(edge_of[in_region], minlength=len(edges))[list(rule.edges)]
        assert counts.max() - counts.min() <= 1  # balanced over the region's edge servers
    assert np.all(edge_of >= 0)
