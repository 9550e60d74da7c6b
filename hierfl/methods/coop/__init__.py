"""coop: its protocol (:mod:`.protocol`: Co-op (asynchronous merging with an age filter and an admission window))."""

from hierfl.methods.coop import protocol as protocol  # noqa: F401  (registers the protocol)
