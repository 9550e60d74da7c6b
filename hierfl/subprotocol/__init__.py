"""Sub-protocols at an aggregation point: extra message rounds between an aggregator and the senders of
its round, run before it aggregates (key agreement and masking for secure aggregation, a consistency
check, any interactive exchange whose cost matters).

* :mod:`hierfl.subprotocol.config` — the public API: the registry :data:`SUBPROTOCOLS`, the base
  :class:`SubProtocolConfig`, what one round costs (:class:`SubRound`, planned from a
  :class:`RoundView`), the result a protocol receives (:class:`SubProtocolDone`) and the
  ``subprotocol:`` scenario section (:mod:`hierfl.subprotocol.section`);
* :mod:`hierfl.subprotocol.rounds` — the shipped ``rounds`` sub-protocol (a configurable list of rounds);
* :mod:`hierfl.subprotocol.driver` — how the driver runs one as real transfers on the emulated links.
"""

from hierfl.subprotocol.config import SUBPROTOCOLS, NoSubProtocol, RoundView, SubProtocolConfig, SubProtocolDone, SubRound
from hierfl.subprotocol.section import SubProtocolSection

__all__ = ["SUBPROTOCOLS", "SubProtocolConfig", "SubRound", "RoundView", "SubProtocolDone", "SubProtocolSection",
           "NoSubProtocol"]
