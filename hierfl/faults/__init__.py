"""Infrastructure faults: an edge server, or the cloud, is down for a while (``edge_fail`` / ``cloud_fail``).

While a server is down every transfer to or from it is lost, what it held is lost, and its
devices re-attach to the nearest live edge server or wait for it; when it is back the protocol
hears it and resumes. The driver plays the outages; what each protocol does about them is its
own (a protocol declares ``supports_infra_faults``); the accounting is shared.

One module per layer role; each obeys the rules of its role's layer (tests/interface/test_layers.py):

================  ===========  =======================================================================
module            layer        holds
================  ===========  =======================================================================
``math.py``       core         pure data: :class:`~hierfl.faults.math.FaultWindow`, the merged
                               outages, the re-attachment rule (:func:`~hierfl.faults.math.nearest_edge`)
``events.py``     dynamics     the ``edge_fail`` and ``cloud_fail`` event kinds (registered by
                               :mod:`hierfl.dynamics`)
``driver.py``     driver       the outages as the driver plays them: transfers withdrawn and refused,
                               ``server_fail`` / ``server_recover`` lines, the protocol told
``protocol.py``   protocols    the bookkeeping every protocol shares: lost work (``fault_loss``),
                               re-attachment plans and moves (``reattach``)
================  ===========  =======================================================================

Where it is wired in elsewhere: the dynamics state holds the windows (``hierfl/core/dynamics.py``),
the transfers know which servers are down (``hierfl/driver/transfers.py``), and each protocol
that survives faults has its semantics in its own code — each protocol's in its method package,
one with clusters it forms itself in its own outages module (the clusters and rounds are its state).

This file imports nothing, so :mod:`hierfl.faults.math` can be imported without pydantic.
"""
