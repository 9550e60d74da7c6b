"""wscc: its protocol (:mod:`.protocol`: WSCC (weight-similarity client clustering, one model per cluster)) and its
clustering math (:mod:`.math`: affinity propagation on the similarity of the devices' updates)."""

from hierfl.methods.wscc import protocol as protocol  # noqa: F401  (registers the protocol)
