"""distrans: its device job's runner (:mod:`.job`)."""

from hierfl.methods.distrans import job as job  # noqa: F401  (registers the runner)
