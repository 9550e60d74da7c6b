"""Sub-protocols at an aggregation point: extra message rounds between an aggregator and the senders of
its round, run before it aggregates (key agreement and masking for secure aggregation, a consistency
check, any interactive exchange whose cost matters).

* :mod:`hierfl.subprotocol.math` — what one round costs (``SubRound``, planned from a ``RoundView``),
  message sizes that grow with the participants, the survivors' threshold;
* :mod:`hierfl.subprotocol.config` — the public API (exported by :mod:`hierfl.plugin`): the registry
  ``SUBPROTOCOLS``, the base ``SubProtocolConfig``, the shipped ``rounds`` sub-protocol and the
  ``subprotocol:`` scenario section (the result a protocol receives, ``SubProtocolDone``, is one of
  the driver's payloads in :mod:`hierfl.env.events`);
* :mod:`hierfl.subprotocol.driver` — the driver's service that runs one as real transfers on the
  emulated links (``env.tier(tier, entity).prepare(...)``).
"""
