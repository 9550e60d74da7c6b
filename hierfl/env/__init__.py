"""The protocol interface: what a protocol sees (clock, world, jobs, transfers, aggregation, telemetry).

This layer imports only :mod:`hierfl.core`; protocols import only it and the core (plus the
config base for their config models). See :mod:`hierfl.env.api`.
"""

from hierfl.kernel.engine import Event, Priority
from hierfl.env.api import Endpoint, Env, Job, Telemetry, Term
from hierfl.env.events import DRIVER_EVENTS, DeviceLost, Payload, ServerDown, ServerJobDone, ServerUp, Timer, describe
from hierfl.env.records import (ClustersRecord, CloudAggregate, DeviceLostRecord, EdgeAggregate, Eval, LeaderLost,
                                FaultLoss, LinkChange, Reattach, Record, Recluster, Regroup, RoundClose, RoundEmpty, RunEnd,
                                RunStart, ServerFail, ServerRecover, UpdateDropped)

__all__ = ["Env", "Telemetry", "Job", "Term", "Endpoint", "Event", "Priority", "Payload", "Timer", "DeviceLost",
           "DRIVER_EVENTS", "describe", "Record", "RunStart", "RunEnd", "Eval", "EdgeAggregate", "CloudAggregate",
           "RoundClose", "RoundEmpty", "UpdateDropped", "DeviceLostRecord", "LinkChange", "Recluster", "LeaderLost",
           "ClustersRecord", "ServerDown", "ServerJobDone", "ServerUp", "ServerFail", "ServerRecover", "FaultLoss", "Reattach", "Regroup"]
