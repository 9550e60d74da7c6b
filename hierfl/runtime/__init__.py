"""Executors: where device training, leader and cloud aggregation actually run.

``local`` runs the role classes in-process (the debugging backend, no Ray); ``ray`` wraps the
same classes as Ray actors. Both give identical results.
"""

from hierfl.runtime.executor import Executor, Job, LocalExecutor, make_executor

__all__ = ["Executor", "Job", "LocalExecutor", "make_executor"]
