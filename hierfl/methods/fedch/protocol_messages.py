"""FedCH's event payloads: the messages of a cluster round and the timers of the cloud and of churn.

Every message carries the construction it belongs to (``gen``) and its cluster; those of a round
carry the round too, so a message left over from a withdrawn round or an older construction is
recognised and ignored. A message that concerns one device is a
:class:`~hierfl.protocols.base.DeviceMsg` (the driver withdraws it when that device drops out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hierfl.env import Payload
from hierfl.protocols.base import DeviceMsg

__all__ = ["MemberMsg", "LeaderDownload", "ClusterUpload", "ClusterTimeout", "ClusterRetry", "LeaderBack"]


@dataclass(frozen=True)
class MemberMsg(DeviceMsg):
    """A member's model in round ``round`` of cluster ``cluster`` (``train_start``, ``train_done``,
    ``member_upload_done``).

    ``leg``: ``member_down`` (leader → member), ``self`` (a device leader's own copy, which does not
    travel) or ``member_up`` (member → leader).
    """

    cluster: int
    gen: int
    round: int
    leg: Literal["member_down", "self", "member_up"]


@dataclass(frozen=True)
class LeaderDownload(Payload):
    """The cloud's ``(w, t)`` on its way to the leader of ``cluster`` (``leader_download_done``)."""

    cluster: int
    gen: int


@dataclass(frozen=True)
class ClusterUpload(Payload):
    """The model of ``cluster``'s round ``round`` on its way to the cloud (``cluster_upload_done``)."""

    cluster: int
    gen: int
    round: int


@dataclass(frozen=True)
class ClusterTimeout(Payload):
    """FedCH's ``sync_timeout`` of ``cluster``'s round ``round`` is over (``cluster_timeout``)."""

    cluster: int
    gen: int
    round: int


@dataclass(frozen=True)
class ClusterRetry(Payload):
    """A member of ``cluster``, whose members were all offline, is back (``cluster_retry``)."""

    cluster: int
    gen: int


@dataclass(frozen=True)
class LeaderBack(Payload):
    """The lost device leader of ``cluster`` may be online again (``leader_back``)."""

    cluster: int
    gen: int
