"""ahfl: its protocol (:mod:`.protocol`: AHFL, asynchronous hierarchical federated learning with leader and
cloud queues)."""

from hierfl.methods.ahfl import protocol as protocol  # noqa: F401  (registers the protocol)
