"""``summary.json`` assembled from the parts each of the run's services contributes.

Every service that knows something about the run's outcome gives it as a small mapping from its
``summary_part()`` method: the run loop (accuracy, targets, events), the context (virtual time,
rounds, totals, the stop reason), the telemetry (staleness, queues), the executor (its name and
workers), the checkpointer (recoveries; where to resume), the robust ledger and the energy
ledger. :class:`Summary` gathers the parts and writes them in one fixed key order, the order
users and the golden snapshots read: :data:`COMPLETED_KEYS` for a completed run,
:data:`ENDED_KEYS` for every other ending. A key a part gives that the order does not name comes
after the named ones, in the order it was given.

The endings (``status``, with ``stop_reason`` and, unless completed, ``error``):

* ``completed``: a stop condition held or nothing was left to happen;
* ``interrupted``: Ctrl-C or SIGTERM (``KeyboardInterrupt``);
* ``diverged``: a non-finite update (``robustness.on_nonfinite: fail``) or global model
  (``stop_reason: diverged``);
* ``failed``: any other error, in a protocol, a role or the output; ``stop_reason:
  cluster_lost`` when the Ray cluster under the run (its raylet or its GCS) stopped answering.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hierfl.output.contract import CONTRACT_VERSION

__all__ = ["COMPLETED_KEYS", "ENDED_KEYS", "CLUSTER_LOST", "Summary", "header"]

CLUSTER_LOST = "cluster_lost"
"""``stop_reason`` of a run whose Ray cluster was lost (status ``failed``)."""

HEADER_KEYS = ("contract_version", "name", "protocol", "seed", "status")

COMPLETED_KEYS = (
    *HEADER_KEYS, "stop_reason",
    # the run loop: what was learned
    "final_accuracy", "final_loss", "best_accuracy", "final_device_accuracy", "target_accuracy",
    "time_to_target_s", "rounds_to_target",
    # the context: where the emulation got to
    "virtual_time_s", "rounds",
    # the real clock and the executor's start-up
    "wall_s", "startup_s", "startup", "executor", "workers",
    # the world
    "devices", "edge_servers", "num_params", "model_bytes",
    "totals", "events",
    # optional blocks, present when their service has something to say
    "staleness", "warnings", "queues", "robustness", "recoveries", "energy", "device_state",
    "server_jobs", "channels", "privacy",
)
"""The keys of a completed run's ``summary.json``, in their order."""

ENDED_KEYS = (*HEADER_KEYS, "error", "wall_s", "stop_reason", "virtual_time_s", "rounds", "totals",
              "final_accuracy", "resume", "checkpoint_t")
"""The keys of any other ending's ``summary.json``, in their order."""


def header(scenario: Any, status: str) -> dict[str, Any]:
    """The part every summary begins with: the output contract's version, the scenario's name,
    protocol and seed, and the status."""
    return {"contract_version": CONTRACT_VERSION, "name": scenario.name, "protocol": scenario.protocol.name,
            "seed": scenario.seed, "status": status}


class Summary:
    """Parts gathered in any order, written in the order of ``keys``."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self._parts: dict[str, Any] = {}

    def add(self, part: Mapping[str, Any] | None) -> Summary:
        """Take the keys of ``part`` (None or empty: nothing); a later part's key replaces an earlier one's."""
        if part:
            self._parts.update(part)
        return self

    def only(self, names: tuple[str, ...], part: Mapping[str, Any] | None) -> Summary:
        """Take only the keys ``names`` of ``part`` (a part written whole by another ending)."""
        if part:
            self._parts.update({k: part[k] for k in names if k in part})
        return self

    def as_dict(self) -> dict[str, Any]:
        """The summary: the named keys in order, then any others in the order they were given."""
        parts = self._parts
        out = {k: parts[k] for k in self.keys if k in parts}
        out.update({k: v for k, v in parts.items() if k not in out})
        return out
