"""wscc: its protocol (:mod:`.protocol`: WSCC (weight-similarity client clustering, one model per cluster))."""

from hierfl.methods.wscc import protocol as protocol  # noqa: F401  (registers the protocol)
