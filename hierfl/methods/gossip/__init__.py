"""gossip: its protocols (:mod:`.protocol`: serverless learning on a device graph, D-PSGD, AD-PSGD and
peer-to-peer learning; their locked pairwise exchanges are :mod:`hierfl.protocols.pairwise`)."""

from hierfl.methods.gossip import protocol as protocol  # noqa: F401  (registers the protocol)
