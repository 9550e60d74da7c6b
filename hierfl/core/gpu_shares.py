"""How many hosts of a GPU share fit on a cluster's nodes (``runtime.gpus_per_host``), as Ray packs them.

Ray places an actor that asks for ``num_gpus`` on one node, and a share below one on one GPU: a
share ``f < 1`` packs ``floor(1 / f)`` actors onto a GPU (Ray counts resources in units of 1/10,000),
a share ``f >= 1`` must be a whole number of GPUs of one node. An actor that cannot be placed waits
forever without a word, so the Ray executor checks its hosts' request with :func:`placement_problem`
before it asks for any (:mod:`hierfl.runtime.gpu_placement`). Pure arithmetic: no Ray here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["RAY_UNITS", "hosts_per_node", "placement_problem", "share_problem"]

RAY_UNITS = 10_000
"""Ray's fixed-point resolution of a resource quantity (a share is rounded to 1/10,000 of a GPU)."""


def share_problem(share: float) -> str | None:
    """What is wrong with a GPU share by itself (None: nothing): a share above one GPU must be whole,
    since Ray gives a host a fraction of one GPU or whole GPUs, never one and a half."""
    if share < 0 or not math.isfinite(share):
        return "must be a number >= 0"
    if share > 1 and share != int(share):
        return ("a share above one GPU must be a whole number of GPUs (Ray gives an actor a fraction of one "
                "GPU or whole GPUs); allowed: 0 (no GPU), a fraction in (0, 1], or 1, 2, 3, ...")
    if 0 < share < 1 and round(share * RAY_UNITS) < 1:
        return f"a share below 1/{RAY_UNITS} of a GPU is zero to Ray"
    return None


def hosts_per_node(node_gpus: float, share: float) -> int:
    """How many hosts of ``share`` GPUs each one node of ``node_gpus`` GPUs can take (``share > 0``).

    A fraction packs onto single GPUs: ``floor(1 / share)`` hosts per GPU (in Ray's units, so 0.3
    gives 3 per GPU, not 3.33); whole shares take whole GPUs of one node."""
    whole = int(math.floor(node_gpus + 1e-9))  # a node's GPUs are whole (logical ones included)
    if share < 1:
        units = max(1, round(share * RAY_UNITS))
        return whole * (RAY_UNITS // units)
    return whole // int(share)


def placement_problem(workers: int, share: float, node_gpus: Sequence[float]) -> str | None:
    """Why ``workers`` hosts of ``share`` GPUs each can never be placed on nodes with ``node_gpus`` GPUs
    (one entry per node), or None when they can (``share == 0``: nothing to place)."""
    if share <= 0:
        return None
    bad = share_problem(share)
    if bad is not None:
        return bad
    total = sum(node_gpus)
    fits = sum(hosts_per_node(g, share) for g in node_gpus)
    if fits >= workers:
        return None
    # (kept under the 300 characters a configuration problem prints)
    hosts = f"{workers} host{'s' if workers != 1 else ''} x {share:g} GPU"
    nodes = len([g for g in node_gpus if g > 0])
    have = f"{total:g} GPU{'s' if total != 1 else ''}" + (f" on {nodes} nodes" if nodes > 1 else "")
    if total <= 0:
        return (f"{hosts} = {workers * share:g} GPUs asked for, the cluster has no GPUs: set "
                "runtime.gpus_per_host: 0, or attach to a cluster with GPUs")
    lost = f"{workers - fits} could never be placed (Ray would wait forever)"
    fix = f"use at most {fits} runtime.workers at this share, a smaller share, or more GPUs"
    if fits == 0:
        return (f"{hosts}: a host's GPUs must be on one node, and no node of the cluster ({have}) has "
                f"{share:g}, so {lost}; use a share one node can give, or larger GPU nodes")
    if workers * share > total + 1e-9:
        return f"{hosts} = {workers * share:g} GPUs asked for, the cluster has {have}: {lost}; {fix}"
    per = RAY_UNITS // max(1, round(share * RAY_UNITS)) if share < 1 else 0
    how = f"a share packs onto single GPUs ({per} per GPU)" if share < 1 else "a host's GPUs must be on one node"
    return f"{hosts}: {how}, so the cluster's {have} take {fits} hosts and {lost}; {fix}"
