"""fedbuff: its protocol (:mod:`.protocol`: FedBuff (buffered asynchronous aggregation)), its staleness function
(:mod:`.math`) and that function's ``staleness:`` plug-in (:mod:`.policies`)."""

from hierfl.methods.fedbuff import policies as policies  # noqa: F401  (registers the staleness function)
from hierfl.methods.fedbuff import protocol as protocol  # noqa: F401  (registers the protocol)
