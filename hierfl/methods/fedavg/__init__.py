"""fedavg: its protocol (:mod:`.protocol`: FedAvg (synchronous federated averaging))."""

from hierfl.methods.fedavg import protocol as protocol  # noqa: F401  (registers the protocol)
