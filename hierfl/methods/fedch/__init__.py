"""fedch: its cluster construction, choice of K and staleness function (:mod:`.math`), and its plug-ins of the
shared kinds, a staleness function and a grouping (:mod:`.policies`)."""

from hierfl.methods.fedch import policies as policies  # noqa: F401  (registers the staleness function and grouping)
