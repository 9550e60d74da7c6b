"""GPUs for the Ray executor's actors: the cluster's GPUs, the placement check, and who may see a GPU.

Before any host actor is requested, :class:`~hierfl.runtime.ray_cluster.RayStart` checks that its
``runtime.workers`` hosts of ``runtime.gpus_per_host`` GPUs each can be placed on the cluster's nodes
(:func:`hierfl.core.gpu_shares.placement_problem` on :func:`cluster_gpus`): a host Ray cannot place waits
forever, silently, so the run is refused at once instead (exit status 2) with the numbers.

Ray 2.60 leaves ``CUDA_VISIBLE_DEVICES`` alone in an actor that reserved no GPU (it used to set it
empty; ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1`` restores that, but only where the raylet's workers
inherit it, which an attached cluster's do not), so such an actor sees every GPU of its node and
``runtime.device: auto`` would make a CUDA context and a copy of the data in each.
:func:`hide_unreserved_gpus` sets it empty in the actor's own process, before torch initialises CUDA,
without a ``runtime_env`` (which would give the actors another worker pool and cost kept hosts their
reuse): only actors that reserved a GPU hold a CUDA context.
"""

from __future__ import annotations

import os
import sys

import ray

from hierfl.core.gpu_shares import placement_problem

__all__ = ["placement_problem", "cluster_gpus", "hide_unreserved_gpus"]


def cluster_gpus() -> list[float]:
    """The GPUs of each alive node of the connected Ray cluster (Ray's logical ``GPU`` resource).

    Read from ``ray.nodes()``; where that gives nothing, the cluster's total
    (``ray.cluster_resources()``) as one node."""
    try:
        per_node = [float(n.get("Resources", {}).get("GPU", 0.0)) for n in ray.nodes() if n.get("Alive", True)]
    except Exception:  # noqa: BLE001 - a Ray client without node listing: the total then
        per_node = []
    if per_node:
        return per_node
    return [float(ray.cluster_resources().get("GPU", 0.0))]


def hide_unreserved_gpus() -> bool:
    """In a Ray actor: make CUDA see no GPU when the actor reserved none (``CUDA_VISIBLE_DEVICES``
    empty); True if hidden. Call before torch initialises CUDA (``torch.cuda.is_available()`` or any
    CUDA call): CUDA reads the variable once, when it initialises. An actor that reserved GPUs keeps
    what Ray set (its own GPU ids). A process where CUDA already runs is left as it is (nothing
    would change for it), as is a process outside an actor."""
    try:
        ctx = ray.get_runtime_context()
        if ctx.get_actor_id() is None or ctx.get_accelerator_ids().get("GPU"):
            return False
    except Exception:  # noqa: BLE001 - not a Ray worker: nothing to hide
        return False
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return False
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return True
