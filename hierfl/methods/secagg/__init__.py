"""secagg: secure aggregation as sub-protocols (``subprotocol: {cloud: secagg}``, ``secagg_plus``).

:mod:`.math` — the bytes and operation counts of each round (Bonawitz et al., CCS 2017; Bell et al., CCS
2020), the Harary neighbour graph and SecAgg+'s degree / threshold finder; :mod:`.math_masking` — the
masking arithmetic itself on small vectors (checked by the tests, never run in an emulation);
:mod:`.config` — the two plug-ins, registered in ``SUBPROTOCOLS``.
"""

from hierfl.methods.secagg import config as config  # noqa: F401  (registers the sub-protocols)
