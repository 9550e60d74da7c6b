"""The output contract: every file a run writes, every ``metrics.jsonl`` event and ``summary.json`` key.

One machine-readable description that the documentation page (``docs/reference/outputs.md``,
generated at build time) and the conformance test (``tests/output/test_output_contract.py``) both read,
so the page cannot describe a file the runs do not write, nor the runs write a key the page does
not describe.

:data:`CONTRACT_VERSION` is written into every ``summary.json``. It changes when a documented
field is removed, renamed or changes meaning or unit; adding a field or an event does not change it
(readers must ignore what they do not know).

Metric events are not listed here by hand: each is a :class:`~hierfl.env.records.Record`
subclass, whose ``EVENT``, docstring and typed fields are the contract (:func:`metric_events`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["CONTRACT_VERSION", "WALL_CLOCK_FIELDS", "MEASURED_BYTES_KEYS", "FILES", "OPTIONAL_FILES", "LINE_FIELDS", "SUMMARY_KEYS", "DEVICES_COLUMNS", "CLUSTERS_FIELDS",
           "EVAL_EXTRA", "metric_events", "unit_of"]

CONTRACT_VERSION = 1
"""Version of the output contract, written as ``summary.json``'s ``contract_version``."""

MEASURED_BYTES_KEYS: tuple[str, ...] = ("channels.*.bytes", "channels.*.saved_bytes", "channels.bytes_saved.*",
                                         "totals.bytes_*")
"""``summary.json`` keys (fnmatch patterns) whose values are computed from the model's numbers when a transfer
channel charges the length measured on each encoded message (``Channel.measures_bytes``: ``exact_bytes: true``):
the bytes charged. Every upload's time, and every event after it, follows from them, so on another machine
(other kernels, other last bits) a run of such a scenario may take another path from the first length that
differs; on one machine it gives the same bits on every executor."""

FILES: dict[str, str] = {
    "config.yaml": "the fully resolved scenario (every default filled in, files as absolute paths) with the seed "
                   "and the package versions (`versions`); `hierfl run config.yaml` repeats the run",
    "metrics.jsonl": "one JSON object per line, appended and flushed as the run goes; every line has `t`, "
                     "`wall_s` and `event`, then the fields of its event (below)",
    "summary.json": "one JSON object, rewritten whole at the end (or when the run fails): status, final and "
                    "best accuracy, time to target, totals",
    "trace.json": "Chrome trace-event format (opens in Perfetto or chrome://tracing): one lane per device, "
                  "edge server and the cloud; spans for download, train, upload and aggregate, in virtual "
                  "microseconds (`ts`, `dur`); queue lengths as counters",
    "clusters.jsonl": "one JSON object per line: cluster membership and leaders at the start and after every "
                      "re-clustering",
    "devices.csv": "one row per device: its drawn profile, its edge server and what the run made of it",
    "final_model.npy": "the final global model as one float32 vector (numpy `.npy`), parameters in the "
                       "model's `state_dict` order",
}
"""Every file of a run directory and what it holds."""

OPTIONAL_FILES: dict[str, str] = {
    "checkpoint.pkl": "while a run is going, or after it was interrupted or failed: its last checkpoint, for "
                      "`hierfl resume`; deleted when the run completes",
    "tensorboard/": "with `output.tensorboard: true`: the eval lines as TensorBoard scalars, by round and by "
                    "virtual time",
}
"""Files written only in some situations."""

LINE_FIELDS: dict[str, tuple[str, str, str]] = {
    "t": ("float", "s (virtual)", "virtual time of the event"),
    "wall_s": ("float", "s (wall clock)", "real seconds since the run started; never used for decisions"),
    "event": ("str", "", "the event kind (one of the events below)"),
}
"""The fields every ``metrics.jsonl`` line starts with: name → (type, unit, meaning)."""

EVAL_EXTRA: dict[str, tuple[str, str, str]] = {
    "cloud_aggregations": ("int", "", "cloud aggregations so far"),
    "edge_aggregations": ("int", "", "edge (leader) aggregations so far"),
    "device_updates": ("int", "", "device updates applied so far"),
    "train_jobs": ("int", "", "local training jobs finished so far"),
    "compute_s": ("float", "s (virtual)", "device compute time spent so far"),
    "bytes_device_tier": ("int", "bytes", "bytes moved between devices and their edge server or the cloud"),
    "bytes_edge_tier": ("int", "bytes", "bytes moved between edge servers and the cloud"),
    "bytes_cloud": ("int", "bytes", "bytes into and out of the cloud"),
    "messages_cloud": ("int", "", "messages into and out of the cloud"),
    "bytes_d2d": ("int", "bytes", "bytes moved device to device (rings of devices, device leaders)"),
    "updates_dropped": ("int", "", "updates discarded (too stale, not finite)"),
    "devices_lost": ("int", "", "jobs or transfers lost to churn or dropout"),
    "stragglers_dropped": ("int", "", "devices abandoned by a straggler policy"),
    "wasted_compute_s": ("float", "s (virtual)", "compute thrown away (lost or abandoned work)"),
}
"""Counters every ``eval`` line carries (the same as ``summary.json``'s ``totals``); optional features
add their own (staleness means, queue lengths, energy, per-device accuracy; with ``privacy.dp``, ``epsilon``
and ``delta``: the privacy spent so far; with ``privacy.dp_sgd``, the same two fields: the largest device's ε)."""

SUMMARY_KEYS: dict[str, tuple[str, str, str]] = {
    "contract_version": ("int", "", "the output contract's version (this page)"),
    "name": ("str", "", "the scenario's name"),
    "protocol": ("str", "", "the protocol's registered name"),
    "seed": ("int", "", "the scenario seed"),
    "status": ("str", "", "completed, failed or interrupted"),
    "stop_reason": ("str", "", "which limit ended the run (virtual_time, rounds, target_accuracy, epsilon, …)"),
    "final_accuracy": ("float|null", "fraction", "test accuracy of the last evaluation"),
    "final_loss": ("float|null", "", "test loss of the last evaluation"),
    "best_accuracy": ("float|null", "fraction", "the highest evaluated accuracy"),
    "final_device_accuracy": ("float", "fraction", "mean per-device accuracy at the end (with local test sets)"),
    "target_accuracy": ("float|null", "fraction", "evaluation.target_accuracy"),
    "time_to_target_s": ("float|null", "s (virtual)", "first evaluation at or above the target"),
    "rounds_to_target": ("int|null", "", "cloud aggregations at that evaluation"),
    "virtual_time_s": ("float", "s (virtual)", "virtual time at the end"),
    "rounds": ("int", "", "cloud aggregations"),
    "wall_s": ("float", "s (wall clock)", "real duration of the run"),
    "startup_s": ("float", "s (wall clock)", "real time before the first event (Ray start, data, first checkpoint)"),
    "startup": ("object", "s (wall clock)", "start-up milestones since launch"),
    "executor": ("str", "", "the executor that ran it (ray, local)"),
    "workers": ("int", "", "training workers"),
    "devices": ("int", "", "devices in the world"),
    "edge_servers": ("int", "", "edge servers (0 = flat)"),
    "num_params": ("int", "", "model parameters"),
    "model_bytes": ("int", "bytes", "bytes of one model message (float32)"),
    "totals": ("object", "", "the counters of the eval lines, at the end"),
    "events": ("int", "", "engine events processed"),
    "staleness": ("object", "updates", "staleness distribution per tier (asynchronous protocols)"),
    "warnings": ("list[str]", "", "warnings raised while building the dynamics"),
    "queues": ("object", "", "update-queue lengths over time per tier (mean, max)"),
    "robustness": ("object", "", "Byzantine robustness: accepted and rejected updates per rule"),
    "recoveries": ("int", "", "lost Ray actors or nodes the run recovered from"),
    "energy": ("object", "J", "energy totals, per-device mean and max, per-tier sums (with energy:)"),
    "device_state": ("object", "bytes", "persistent per-device state held at the end (trainers that keep it: "
                     "control variates, drifts): devices holding some, bytes in total and per such device"),
    "server_jobs": ("object", "", "server tasks (a protocol's own computation at a server): tasks started, "
                    "virtual seconds busy and bytes each tier's points keep, per tier (present when any ran)"),
    "channels": ("object", "bytes", "transfer channels (with channels:): per link direction the channel, messages, "
                 "bytes sent (the encoders' output: values, indices, headers), the raw float32 bytes they replace, bytes saved, encode and decode seconds; "
                 "bytes_saved per tier"),
    "privacy": ("object", "", "differential privacy (with privacy.dp): mode, noise multiplier, ε at δ, the accountant, "
                "releases and compositions, cohort and devices, participations, the ε budget; with privacy.dp_sgd "
                "(mechanism dp_sgd): noise multiplier, clip, the largest and mean device ε at δ, the accountant, "
                "the batch sampling, jobs and the most steps of one device, the ε budget"),
    "error": ("str", "", "the error of a failed run"),
    "resume": ("str", "", "the command that continues a failed or interrupted run"),
    "checkpoint_t": ("float", "s (virtual)", "virtual time of the checkpoint a resume starts from"),
}
"""Every top-level ``summary.json`` key: name → (type, unit, meaning)."""

DEVICES_COLUMNS: dict[str, tuple[str, str, str]] = {
    "device": ("int", "", "device id"),
    "tier": ("str", "", "its tier (custom = drawn from the distributions)"),
    "samples": ("int", "samples", "training samples it holds"),
    "speed_sps": ("float", "samples/s", "training throughput"),
    "uplink_mbps": ("float", "Mbit/s", "access uplink"),
    "downlink_mbps": ("float", "Mbit/s", "access downlink"),
    "latency_ms": ("float", "ms", "one-way latency of the access link"),
    "edge": ("int", "", "its edge server (or cluster); -1 without one"),
    "edge_latency_ms": ("float", "ms", "extra latency to that edge server"),
    "compute_s_per_epoch": ("float", "s (virtual)", "one epoch over its samples"),
    "download_s": ("float", "s (virtual)", "one uncontended model download"),
    "upload_s": ("float", "s (virtual)", "one uncontended model upload"),
    "availability": ("str", "", "its availability model"),
    "slowdowns": ("int", "", "slowdown windows it goes through"),
    "energy_compute_j": ("float", "J", "compute energy: training, and the crypto, channel coding and DP work "
                         "timed on the device (with energy:)"),
    "energy_comm_j": ("float", "J", "radio energy (with energy:)"),
    "energy_j": ("float", "J", "their sum (with energy:)"),
    "dp_epsilon": ("float", "", "its ε at δ from the DP-SGD steps it ran (with privacy.dp_sgd)"),
    "dp_steps": ("int", "", "the DP-SGD steps its jobs ran on its data (with privacy.dp_sgd)"),
}
"""The columns of ``devices.csv`` in order (the ``energy_*`` ones only with an ``energy:`` section, the ``dp_*``
ones only with ``privacy.dp_sgd``)."""

CLUSTERS_FIELDS: dict[str, tuple[str, str, str]] = {
    "t": ("float", "s (virtual)", "when this grouping took effect"),
    "reason": ("str", "", "start, or what re-clustered"),
    "grouping": ("str", "", "the grouping rule (flat without edge servers)"),
    "members": ("list[list[int]]", "", "device ids per cluster"),
    "leaders": ("list", "", "each cluster's leader (an edge server, or a device where devices lead)"),
}
"""The fields every ``clusters.jsonl`` line has (a protocol appends its own details)."""

WALL_CLOCK_FIELDS: frozenset[str] = frozenset({"wall_s", "startup_s"})
"""Fields measured on the real (wall) clock: every other ``*_s`` field is virtual seconds. They are
the only fields that differ between two runs of the same scenario and seed."""

_UNITS = (("_mbps", "Mbit/s"), ("_ms", "ms"), ("_j", "J"), ("_s", "s (virtual)"), ("bytes", "bytes"))


def unit_of(name: str) -> str:
    """The unit a field's name declares: ``s (wall clock)`` for :data:`WALL_CLOCK_FIELDS`, else ``_s``
    virtual seconds, ``_ms``, ``_mbps``, ``_j``, ``bytes``."""
    if name == "t":
        return "s (virtual)"
    if name in WALL_CLOCK_FIELDS:
        return "s (wall clock)"
    for suffix, unit in _UNITS:
        if name.endswith(suffix) or name.startswith(suffix):
            return unit
    return ""


def _records() -> list[type]:
    from hierfl.env import records

    out, todo = [], list(records.Record.__subclasses__())
    while todo:
        cls = todo.pop(0)
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in out if c.EVENT]


def metric_events() -> dict[str, dict[str, Any]]:
    """Every ``metrics.jsonl`` event: ``{event: {doc, fields: {name: (type, unit)}, optional, open}}``.

    ``open``: the record carries ``extra`` fields (protocol-specific, appended after the declared
    ones); ``optional``: declared fields omitted from the line when unset.
    """
    from hierfl.env.records import OPEN_FIELDS

    events: dict[str, dict[str, Any]] = {}
    for cls in sorted(_records(), key=lambda c: c.EVENT):
        declared = [f for f in dataclasses.fields(cls) if f.name not in OPEN_FIELDS]
        events[cls.EVENT] = {
            "doc": " ".join((cls.__doc__ or "").split()),
            "fields": {f.name: (str(f.type), unit_of(f.name)) for f in declared},
            "optional": tuple(cls.OPTIONAL),
            "open": any(f.name in OPEN_FIELDS for f in dataclasses.fields(cls)),
        }
    return events
