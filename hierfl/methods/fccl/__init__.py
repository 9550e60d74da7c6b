"""fccl: its device job's runner (:mod:`.job`)."""

from hierfl.methods.fccl import job as job  # noqa: F401  (registers the runner)
