"""hierfavg: its protocol (:mod:`.protocol`: HierFAVG (client-edge-cloud hierarchical federated averaging))."""

from hierfl.methods.hierfavg import protocol as protocol  # noqa: F401  (registers the protocol)
