"""fedmd: its protocol (:mod:`.protocol`) and its device job's runner (:mod:`.job`)."""

from hierfl.methods.fedmd import job as job  # noqa: F401  (registers the runner)
from hierfl.methods.fedmd import protocol as protocol  # noqa: F401  (registers the protocol)
