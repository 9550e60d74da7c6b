"""Executors: where device training, leader and cloud aggregation actually run.

``local`` runs the role classes in-process (the debugging backend, no Ray); ``ray`` wraps the
same classes as Ray actors. Both give identical results. :func:`start_executor` begins an
executor's start-up before the run's data exists (Ray's processes start while it is generated).
"""

from hierfl.runtime.executor import ClusterLink, Executor, ExecutorState, Job, LocalExecutor, Servers, make_executor
from hierfl.runtime.start import ExecutorStart, start_executor

__all__ = ["ClusterLink", "Executor", "ExecutorStart", "ExecutorState", "Job", "LocalExecutor", "Servers",
           "make_executor", "start_executor"]
