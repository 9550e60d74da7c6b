"""Cross-section checks of a scenario: what no single section can see on its own.

Run by the loader after the schema accepted every section, in two steps:

1. :func:`resolve_files` reads the topology file (once: the builders get the same parse) and
   fills ``topology.edge_servers`` from it; a file that cannot be read stops here.
2. :func:`cross_checks` gathers every remaining problem at once: edge servers against devices,
   traces against devices, what the protocol supports (churn, barriers, learning plug-ins), and
   each event's own checks. Plug-ins answer through their hooks (``churn``, ``waits_for_all``,
   ``aggregation_points``, ``refusal``, :meth:`problems`), never through their names.

:func:`raw_cross_checks` runs on the raw mapping when the schema rejected something else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import close_names
from hierfl.core.gpu_shares import share_problem
from hierfl.devices import shipped_tiers
from hierfl.dynamics import EVENTS, Facts
from hierfl.dynamics.availability import steady_names
from hierfl.policies.straggler import STRAGGLERS, neutral_names
from hierfl.protocols import PROTOCOLS
from hierfl.scenario.schema import Scenario
from hierfl.topology import TopologyFileError, check_devices, load_topology_file
from hierfl.topology.devgraph import DEVICE_GRAPHS

__all__ = ["resolve_files", "cross_checks", "raw_cross_checks", "ignored_settings", "scenario_warnings"]


def _edge_count_problem(edges: Any, n: Any) -> list[Problem]:
    if isinstance(edges, int) and isinstance(n, int) and n >= 1 and edges > n:
        return [Problem("topology.edge_servers", f"more edge servers than devices ({n}); allowed: 0..{n}", edges)]
    return []


def raw_cross_checks(raw: dict[str, Any]) -> list[Problem]:
    """Cross-section checks that can run even when the schema rejected something else."""
    devices, topology = raw.get("devices"), raw.get("topology")
    if isinstance(devices, dict) and isinstance(topology, dict) and not (topology.get("file") or topology.get("generator")):
        return _edge_count_problem(topology.get("edge_servers"), devices.get("count"))
    return []


def resolve_files(scenario: Scenario) -> tuple[Scenario, list[Problem]]:
    """Read ``topology.file`` and fill ``topology.edge_servers`` from it (an explicit other count is a problem)."""
    topo = scenario.topology
    if topo.file is None:
        return scenario, []
    try:
        spec = load_topology_file(topo.path or topo.file)
    except TopologyFileError as exc:  # the message names the file and line
        return scenario, [Problem("topology.file", str(exc), topo.file)]
    if topo.edge_servers is None:
        filled = topo.model_copy(update={"edge_servers": spec.num_edges})
        return scenario.model_copy(update={"topology": filled}), []
    if topo.edge_servers != spec.num_edges:
        return scenario, [Problem("topology", f"edge_servers is {topo.edge_servers} but the topology file {topo.file} "
                                  f"defines {spec.num_edges} edge servers; leave edge_servers out (or null) to take "
                                  "the topology's")]
    return scenario, []


def _topology_problems(scenario: Scenario) -> list[Problem]:
    """What does not fit N devices: a topology file says itself (file and line), a generator, or plain edge servers."""
    topo, n = scenario.topology, scenario.devices.count
    if topo.file is not None:
        return [Problem("topology.file", msg) for msg in check_devices(load_topology_file(topo.path or topo.file), n)]
    if topo.generator is not None:
        if topo.generator.num_edges > n:
            return [Problem("topology.generator", f"the {topo.generator.name} generator makes "
                            f"{topo.generator.num_edges} edge servers but there are only {n} devices "
                            "(devices.count); allowed: at most one edge server per device")]
        return []
    return _edge_count_problem(topo.edge_servers, n)


def cross_checks(scenario: Scenario) -> list[Problem]:
    """Every cross-section problem of a scenario whose sections are each valid."""
    n = scenario.devices.count
    problems = _topology_problems(scenario)
    graph = scenario.topology.device_graph
    if graph is not None:
        problems.extend(Problem(f"topology.device_graph.{key}", msg, value) for key, msg, value in graph.problems(n))
    if scenario.devices.capacity_trace is not None:
        problems.extend(scenario.devices.capacity_trace.check(n, "devices.capacity_trace"))
    ev, stop = scenario.evaluation, scenario.stop
    if stop.target_accuracy is not None and ev.every_s is None:
        problems.append(Problem("evaluation.every_s",
                                "stop.target_accuracy needs periodic evaluation: set evaluation.every_s"))
    if stop.virtual_time_s is not None and ev.every_s is not None and ev.every_s > stop.virtual_time_s:
        problems.append(Problem("evaluation.every_s",
                                f"longer than the run (stop.virtual_time_s = {stop.virtual_time_s:g})", ev.every_s))
    if ev.device_eval_cost != "free" and scenario.data.local_test_fraction <= 0:
        problems.append(Problem("evaluation.device_eval_cost", "charges the devices' own evaluation, which needs "
                                "data.local_test_fraction > 0; allowed without it: free", ev.device_eval_cost))
    problems.extend(_dynamics_checks(scenario))
    problems.extend(scenario.protocol.check(scenario))
    # learning plug-ins: a trainer or server optimizer the protocol cannot honour is an error, not ignored
    problems.extend(_trainer_checks(scenario))
    problems.extend(scenario.server_optimizer.check(type(scenario.protocol).server_optimizer_tiers,
                                                    scenario.protocol.name))
    problems.extend(_robust_checks(scenario))
    if not scenario.channels.default:  # transfer channels only where the protocol honours them
        problems.extend(scenario.channels.problems(scenario.protocol, scenario.topology.edge_servers or 0))
    if not scenario.subprotocol.default:  # a sub-protocol only where the protocol can run one
        problems.extend(scenario.subprotocol.problems(scenario))
    problems.extend(scenario.privacy.problems(scenario))  # privacy.dp: an accountant that covers the sampling
    problems.extend(_energy_checks(scenario))
    problems.extend(_runtime_checks(scenario))
    problems.extend(_models_checks(scenario))
    problems.extend(_serverless_checks(scenario))
    problems.extend(_unread_training(scenario))
    problems.extend(ignored_settings(scenario))
    return problems


def ignored_settings(scenario: Scenario) -> list[Problem]:
    """Every key set in the scenario that its section would ignore (each config's ``ignored_settings``:
    ``read_only_with`` declarations and the plug-ins' own), refused by declaration."""
    return [Problem(path, message, value, refused=True)
            for path, message, value in _unread(scenario, "", lambda c: c.ignored_settings())]


def scenario_warnings(scenario: Scenario) -> list[str]:
    """Keys set in a valid scenario that would be ignored, where their declaration warns instead of refusing
    (``ReadWith(..., warn=True)``): ``key.path: message (got value)`` lines."""
    return [Problem(path, message, value).format()
            for path, message, value in _unread(scenario, "", lambda c: c.unread_warnings())]


def _unread(node: Any, path: str, found: Callable[[ConfigModel], list[tuple[str, str, Any]]]
            ) -> list[tuple[str, str, Any]]:
    """``found(config)`` of every config model in the tree under ``node``, with key paths from the root."""
    out: list[tuple[str, str, Any]] = []
    if isinstance(node, ConfigModel):
        out.extend((f"{path}.{key}".lstrip("."), message, value) for key, message, value in found(node))
        for key in type(node).model_fields:
            out.extend(_unread(getattr(node, key), f"{path}.{key}", found))
    elif isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            out.extend(_unread(item, f"{path}.{i}", found))
    elif isinstance(node, dict):
        for key, item in node.items():
            out.extend(_unread(item, f"{path}.{key}", found))
    return out


def _unread_training(scenario: Scenario) -> list[Problem]:
    """Keys of ``training:`` the protocol's own jobs never read (its ``unread_training``), set anyway."""
    proto, training = scenario.protocol, scenario.training
    return [Problem(f"training.{key}", f"protocol {proto.name} trains with its own optimizer and never reads "
                    f"training.{key}, so it would be ignored; allowed: its default "
                    f"({type(training).model_fields[key].default}), or leave it out", getattr(training, key),
                    refused=True)
            for key in type(proto).unread_training if training.non_default(key)]


def _serverless_checks(scenario: Scenario) -> list[Problem]:
    """A protocol without servers has no use for edge servers; one that mixes over the device graph's
    edges needs some (``needs_graph_edges``; a graph's ``no_edges``)."""
    proto, topo = scenario.protocol, scenario.topology
    cls = type(proto)
    problems: list[Problem] = []
    if cls.serverless and topo.file is None and topo.generator is None and (topo.edge_servers or 0) > 0:
        problems.append(Problem("topology.edge_servers", f"protocol {proto.name} has no servers: devices mix over "
                                "topology.device_graph, so edge servers would be ignored; allowed: 0",
                                topo.edge_servers, refused=True))
    graph = topo.device_graph
    if graph is not None and cls.needs_graph_edges and type(graph).no_edges:
        able = ", ".join(n for n in PROTOCOLS.names() if PROTOCOLS.get(n).serverless
                         and not PROTOCOLS.get(n).needs_graph_edges)
        fits = ", ".join(n for n in DEVICE_GRAPHS.names() if not DEVICE_GRAPHS.get(n).no_edges)
        problems.append(Problem("topology.device_graph.name", f"the {graph.name} graph has no edges, so under "
                                f"{proto.name} no device would ever communicate; allowed: {fits} (learning alone: protocol "
                                f"{able or 'none'})", graph.name, refused=True))
    return problems


def _models_checks(scenario: Scenario) -> list[Problem]:
    """``models:`` names tiers the devices are drawn from (its layouts are compared when the models are built);
    a public split is for a protocol that uses it."""
    tiers = scenario.devices.tiers
    problems: list[Problem] = []
    proto = scenario.protocol
    if scenario.data.public is not None and not type(proto).uses_public_data:
        able = ", ".join(n for n in PROTOCOLS.names() if PROTOCOLS.get(n).uses_public_data)
        problems.append(Problem("data.public", f"protocol {proto.name} does not use public data; allowed: null "
                                f"(protocols that use it: {able})"))
    if not scenario.models:
        return problems
    if tiers is None:
        return [*problems, Problem("models", "a model per device tier needs devices drawn from tiers: set "
                                   "devices.tiers (or remove models:)")]
    return problems + [Problem(f"models.{name}", f"not a tier of devices.tiers; allowed: {', '.join(tiers)}")
                       for name in scenario.models if name not in tiers]


def _cuda_available() -> bool:
    """``torch.cuda.is_available()`` (torch is imported only for ``runtime.device: cuda``)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _cuda_bf16() -> bool:
    """``torch.cuda.is_bf16_supported()`` (called only where CUDA is available)."""
    import torch

    return bool(torch.cuda.is_bf16_supported())


def _runtime_checks(scenario: Scenario) -> list[Problem]:
    rt = scenario.runtime
    share = share_problem(rt.gpus_per_host)
    if share is not None:
        return [Problem("runtime.gpus_per_host", share, rt.gpus_per_host)]
    if rt.group_max != "auto" and not rt.fast_path:  # a cap of groups that are never formed: refused, not ignored
        return [Problem("runtime.group_max", "a group cap is used only with runtime.fast_path: true (jobs trained "
                        "in groups); allowed here: auto", rt.group_max)]
    if rt.device == "cuda" and not _cuda_available():
        return [Problem("runtime.device", "CUDA is not available on this machine (torch.cuda.is_available() is "
                        "false); allowed: cpu, cuda (where CUDA is available), auto (cuda if available, else cpu)",
                        rt.device)]
    # under Ray a device host that reserves no GPU sees none (hierfl.runtime.gpu_placement): cuda there
    # would fail in every host; auto is allowed (it resolves to cpu in such a host)
    if rt.executor == "ray" and rt.device == "cuda" and rt.gpus_per_host == 0:
        return [Problem("runtime.gpus_per_host", "runtime.device: cuda on the Ray executor needs GPUs reserved for "
                        "the device hosts, which otherwise see none: set runtime.gpus_per_host (e.g. 1 with "
                        "runtime.workers: the cluster's GPUs, or 0.5 for two hosts per GPU), or runtime.device: "
                        "auto or cpu", rt.gpus_per_host)]
    # torch's CUDA autocast silently falls back to fp32 on a GPU without bfloat16: refuse instead
    # (device auto is resolved on each host; the host refuses it there, hierfl.learn.precision)
    if rt.device == "cuda" and rt.precision == "bf16" and not _cuda_bf16():
        return [Problem("runtime.precision", "this GPU does not support bfloat16 (torch.cuda.is_bf16_supported() "
                        "is false); allowed here: fp32", rt.precision)]
    return []


def _robust_checks(scenario: Scenario) -> list[Problem]:
    """``aggregation:`` fits the protocol and the number of updates each of its aggregations combines."""
    agg = scenario.aggregation
    if agg.default:
        return []
    edges = scenario.topology.edge_servers or 0
    protocol = scenario.protocol
    return agg.problems(protocol, edges, protocol.expected_inputs(scenario.devices.count, edges))


def _energy_checks(scenario: Scenario) -> list[Problem]:
    """With ``energy:`` and ``devices.tiers``: every tier has a J/FLOP and a link type with radio figures."""
    energy, dev = scenario.energy, scenario.devices
    if energy is None or dev.tiers is None:
        return []
    specs = {**shipped_tiers(), **dev.custom_tiers}
    radios = energy.radios()
    problems: list[Problem] = []
    for tier in dev.tiers:
        if tier not in specs:
            continue  # an unknown tier is reported by _dynamics_checks
        if energy.tier_j_per_flop(tier) is None:
            problems.append(Problem(f"energy.j_per_flop.{tier}", "this tier has no default J/FLOP; give one "
                                    f"(defaults exist for {', '.join(sorted(energy.j_per_flop_defaults()))})"))
        link = energy.tier_links.get(tier) or specs[tier].link or energy.device_link
        if link not in radios:
            problems.append(Problem(f"energy.tier_links.{tier}", f"tier {tier} uses link type {link!r}, which has "
                                    f"no radio figures; allowed: {', '.join(sorted(radios))} (or add it under "
                                    "energy.links)", link))
    return problems


def _dynamics_checks(scenario: Scenario) -> list[Problem]:
    """Tiers that exist, availability and events the protocol supports, straggler policies it can apply."""
    problems: list[Problem] = []
    dev = scenario.devices
    known = sorted(set(shipped_tiers()) | set(dev.custom_tiers))
    allowed = ", ".join(known)
    for name in (dev.tiers or {}):
        if name not in known:
            close = close_names(name, known)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            problems.append(Problem(f"devices.tiers.{name}", f"unknown tier{hint}; allowed: {allowed} "
                                    "(or define it under devices.custom_tiers)"))
    avail = dev.availability
    problems.extend(avail.problems(dev.count, known, "devices.availability"))
    proto = scenario.protocol
    if not proto.supports_churn:
        what = f"protocol {proto.name} does not model devices dropping out"
        if avail.churn:
            problems.append(Problem("devices.availability", f"{what}; allowed: {', '.join(steady_names())}",
                                    avail.name))
        if dev.dropout > 0:
            problems.append(Problem("devices.dropout", f"{what}; allowed: 0", dev.dropout))
        churn_kinds = "/".join(cls.name for cls in EVENTS.classes() if cls.churn)
        for i, event in enumerate(scenario.events):
            if event.spec.churn:
                problems.append(Problem(f"events.{i}.{event.kind}", f"{what} ({churn_kinds} events)"))
    if not proto.supports_infra_faults:
        able = ", ".join(n for n in PROTOCOLS.names() if PROTOCOLS.get(n).supports_infra_faults)
        for i, event in enumerate(scenario.events):
            if event.spec.infra_fault:
                problems.append(Problem(f"events.{i}.{event.kind}", f"protocol {proto.name} does not emulate edge-"
                                        f"server or cloud outages (no edge tier to fail, or none that keeps "
                                        f"working without the cloud); allowed with: {able}"))
    problems.extend(_straggler_checks(scenario))
    end = scenario.stop.virtual_time_s
    e_count = scenario.topology.edge_servers or 0
    for key in ("edge_ingress_mbps", "edge_egress_mbps"):
        if getattr(scenario.network, key) is not None and e_count == 0:
            problems.append(Problem(f"network.{key}", "the scenario has no edge servers (topology.edge_servers: 0); "
                                    "use network.cloud_ingress_mbps / cloud_egress_mbps for the cloud's links"))
    facts = Facts(num_devices=dev.count, num_edges=e_count, tiers=known)
    for i, event in enumerate(scenario.events):
        if end is not None and event.at_s >= end:
            problems.append(Problem(f"events.{i}.at_s", f"outside the run (stop.virtual_time_s = {end:g}); "
                                    f"allowed: 0 <= at_s < {end:g}", event.at_s))
        problems.extend(event.spec.problems(f"events.{i}.{event.kind}", facts))
    return problems


def _straggler_checks(scenario: Scenario) -> list[Problem]:
    """A policy stands only at a point the protocol declares (``aggregation_points``) where it means
    something: a synchronous point a policy may close, and the policy's own ``refusal`` says none."""
    problems: list[Problem] = []
    proto = scenario.protocol
    points = {p.key: p for p in type(proto).aggregation_points}
    for key, policy in (("straggler", scenario.straggler), ("straggler.cloud", scenario.straggler.cloud)):
        point = points.get(key)
        if policy.waits_for_all:
            continue
        if point is not None and point.closable:
            why = policy.refusal(point)
            if why is not None:  # a closable point, but not for this policy
                fits = [n for n in STRAGGLERS.names() if STRAGGLERS.example(n).refusal(point) is None]
                problems.append(Problem(f"{key}.name", f"{policy.name} at the {point.flow} round of {proto.name}: "
                                        f"{why}; allowed there: {', '.join(fits)}", policy.name,
                                        refused=True))
            continue
        why = f"{proto.name} has no aggregation point at {key}" if point is None else f"{point.flow}: {policy.refusal(point)}"
        takes = ", ".join(p.label for p in points.values() if p.closable) or "nowhere"
        able = ", ".join(n for n in PROTOCOLS.names()
                         if any(p.key == key and p.closable for p in PROTOCOLS.get(n).aggregation_points))
        problems.append(Problem(f"{key}.name", f"{why}; allowed: {', '.join(neutral_names())} ({proto.name} takes a "
                                f"policy at {takes}; protocols that take one at {key}: {able})", policy.name,
                                refused=True))
    return problems


def _trainer_checks(scenario: Scenario) -> list[Problem]:
    """What the local trainer needs: a protocol carrying control variates; every trained update delivered."""
    trainer, proto = scenario.training.trainer, scenario.protocol
    name = trainer.name
    if trainer.timing_only:
        bad = [(key, value) for key, value in (("stop.target_accuracy", scenario.stop.target_accuracy),
                                               ("evaluation.target_accuracy", scenario.evaluation.target_accuracy))
               if value is not None]
        timing = [Problem(key, f"trainer {name} trains and evaluates no model (timing only): no accuracy to "
                          "reach; allowed: null", value) for key, value in bad]
        decides = type(proto).decides_on_models
        if decides:
            timing.append(Problem("training.trainer", f"protocol {proto.name} {decides}: timing only (trainer {name}) "
                                  "would not give a training run's times and selections; allowed: a trainer "
                                  "that trains (e.g. sgd)", name))
        return timing
    if trainer.needs_control_variates and not proto.control_variates:
        able = [n for n in PROTOCOLS.names() if PROTOCOLS.get(n).control_variates]
        return [Problem("training.trainer", f"{name} needs a protocol with synchronous rounds that carries "
                        f"control variates; protocol {proto.name!r} does not; allowed: {', '.join(able)}", name)]
    problems = [Problem(key, message, value) for key, message, value in trainer.scenario_problems(scenario)]
    problems += _layout_problems(trainer)
    if trainer.needs_every_update is None:
        return problems
    why = f"{name} needs {trainer.needs_every_update}"
    policy, avail = scenario.straggler, scenario.devices.availability
    for key, p in (("straggler.name", policy), ("straggler.cloud.name", policy.cloud)):
        if not p.waits_for_all:
            problems.append(Problem(key, f"{why}; allowed with {name}: {', '.join(neutral_names())}", p.name))
    if avail.churn:
        problems.append(Problem("devices.availability", f"{why}; allowed with {name}: {', '.join(steady_names())}",
                                avail.name))
    for i, event in enumerate(scenario.events):
        if event.spec.takes_devices_offline:
            problems.append(Problem(f"events.{i}.{event.kind}", f"{why}: devices cannot leave mid-run with {name}"))
        elif event.spec.infra_fault:
            problems.append(Problem(f"events.{i}.{event.kind}", f"{why}: a failed server loses updates"))
    return problems


def _layout_problems(trainer: Any) -> list[Problem]:
    """A trainer's declared messages (``TrainerConfig.layout``, which sizes every transfer) against what its jobs
    return (``JobMethod.layout``) and what control variates need (the control after the model, summed apart):
    a mismatch would move vectors of one length while charging the bytes of another."""
    from hierfl.core.message import CONTROLLED

    layout, name = trainer.layout, trainer.name
    if trainer.needs_control_variates and layout != CONTROLLED:
        return [Problem("training.trainer", f"{name} needs control variates, so its messages carry the model and the "
                        f"control (layout CONTROLLED); it declares parts {', '.join(layout.names)}", name)]
    job = trainer.spec_fields().get("method")
    if job is not None and type(job).layout.extra and type(job).layout != layout:
        return [Problem("training.trainer", f"{name}'s jobs return parts {', '.join(type(job).layout.names)} but its "
                        f"messages declare {', '.join(layout.names)} (TrainerConfig.layout sizes every transfer)", name)]
    return []
