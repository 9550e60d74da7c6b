"""fedbuff: its staleness function (:mod:`.math`) and that function's ``staleness:`` plug-in (:mod:`.policies`)."""

from hierfl.methods.fedbuff import policies as policies  # noqa: F401  (registers the staleness function)
