"""The driver: virtual clock + event queue + protocol + executor + telemetry.

:mod:`~hierfl.driver.context` implements the protocol interface, :mod:`~hierfl.driver.transfers`
is the network model it composes, :mod:`~hierfl.driver.loop` the event loop and evaluations,
:mod:`~hierfl.driver.run` :func:`run_scenario`.
"""

from hierfl.driver.context import Context, RunError
from hierfl.driver.loop import ProgressFn
from hierfl.driver.run import RunResult, package_versions, resume_run, run_scenario

__all__ = ["Context", "ProgressFn", "RunError", "RunResult", "package_versions", "resume_run", "run_scenario"]
