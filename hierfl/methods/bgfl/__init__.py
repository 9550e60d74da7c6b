"""bgfl: its protocol (:mod:`.protocol`: BGFL, blockchain-based two-stage federated learning: a shared dataset
through a chain, then federated learning with a Jensen–Shannon client selection)."""

from hierfl.methods.bgfl import protocol as protocol  # noqa: F401  (registers the protocol)
