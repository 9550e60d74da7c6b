"""The executor interface, the in-process executor, and :func:`make_executor`, which starts the one a run names.

The parts live in their own modules, re-exported here (callers, checkpoints and docs name this module):

* :mod:`hierfl.runtime.executor_api`: :class:`Executor` and its parts (``servers``, ``state``,
  ``cluster``), :class:`RunData`, and the shared evaluation helper :func:`eval_groups`;
* :mod:`hierfl.runtime.local_executor`: :class:`LocalExecutor`, the in-process (sequential) executor.
"""

from __future__ import annotations

from hierfl.core.jobs import Job as Job, Term as Term
from hierfl.executors import EXECUTORS
from hierfl.runtime.executor_api import (ClusterLink as ClusterLink, Executor as Executor,
                                         ExecutorState as ExecutorState, RunData as RunData, Servers as Servers,
                                         eval_groups as eval_groups)
from hierfl.runtime.local_executor import LocalExecutor as LocalExecutor
# the private names too: checkpoints pickled before the split name the fast path's pending jobs by this
# module's path, and tests patch the local executor's parts through it
from hierfl.runtime.local_executor import (_Handles as _Handles, _LocalServers as _LocalServers,
                                           _LocalState as _LocalState, _Pending as _Pending, _value as _value)

__all__ = ["Job", "Executor", "Servers", "ExecutorState", "ClusterLink", "LocalExecutor", "RunData",
           "eval_groups", "make_executor", "Term"]


def make_executor(kind: str, data: RunData, workers: int | str = "auto", address: str | None = None) -> Executor:
    """The executor named by ``runtime.executor``: a plug-in of :data:`hierfl.executors.EXECUTORS`.

    Ray is imported only when the ``ray`` executor is made. An unknown name raises ``ValueError``
    listing the allowed ones.
    """
    try:
        config = EXECUTORS.get(kind)(name=kind)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    return config.create(data, workers=workers, address=address)  # type: ignore[no-any-return]
