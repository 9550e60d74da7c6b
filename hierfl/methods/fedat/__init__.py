"""fedat: its protocol (:mod:`.protocol`: FedAT (synchronous tiers, asynchronous across tiers))."""

from hierfl.methods.fedat import protocol as protocol  # noqa: F401  (registers the protocol)
