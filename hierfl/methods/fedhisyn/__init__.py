"""fedhisyn: its protocol (:mod:`.protocol`: FedHiSyn (capacity classes, ring exchange inside each class))."""

from hierfl.methods.fedhisyn import protocol as protocol  # noqa: F401  (registers the protocol)
