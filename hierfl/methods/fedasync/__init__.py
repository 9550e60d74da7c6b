"""fedasync: its protocol (:mod:`.protocol`: FedAsync, asynchronous federated optimisation with
staleness-weighted mixing; its flat asynchronous server is FedBuff's base too)."""

from hierfl.methods.fedasync import protocol as protocol  # noqa: F401  (registers the protocol)
