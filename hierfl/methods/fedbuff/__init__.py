"""fedbuff: its protocol (:mod:`.protocol`: FedBuff (buffered asynchronous aggregation))."""

from hierfl.methods.fedbuff import protocol as protocol  # noqa: F401  (registers the protocol)
