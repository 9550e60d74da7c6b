"""rhfl: its device job's runner (:mod:`.job`)."""

from hierfl.methods.rhfl import job as job  # noqa: F401  (registers the runner)
