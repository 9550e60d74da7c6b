"""A ledger hosted by a server, as a protocol uses it: the consensus delay model plus its transfers and trace.

The delay model itself is pure (:mod:`hierfl.core.chain`); this service binds one chain to a host
(an edge server or the cloud) and to the run:

* block intervals come from the named stream ``("pow_mining", chain)`` (exponential, proof of work)
  or are fixed (:class:`~hierfl.core.chain.FixedInterval`);
* :meth:`Ledger.submit` writes bytes to the chain now and says when they are included and confirmed;
  the blocks that carry data appear as spans on the chain's own trace lane (``("chain", id)``: a
  block's span runs from the previous block to the moment it is found), each submission as a
  ``submit`` instant and its confirmation as a ``confirm`` instant; the counters ``chain_blocks`` and
  ``bytes_on_chain`` add them up;
* :meth:`Ledger.upload` and :meth:`Ledger.download` are the bulk transfers between a device and the
  chain host (shares, the shared set), through the network model like any message.

A protocol that shares data through a chain uses it (Lian et al., IEEE TCSS 2023; docs/explanation/algorithms.md
§5.13 and §5.15).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hierfl.core.chain import Chain, ChainParams, FixedInterval, Receipt
from hierfl.core.jobs import Endpoint
from hierfl.env import Env

__all__ = ["Ledger"]


class Ledger:
    """One chain, hosted at ``host``, drawn on trace lane ``("chain", lane)``; mining starts at ``env.now``."""

    def __init__(self, env: Env, host: Endpoint, lane: int, params: ChainParams, interval: str = "exponential") -> None:
        if interval not in ("exponential", "fixed"):
            raise ValueError(f"Ledger: interval must be exponential or fixed, got {interval!r}")
        self.env = env
        self.host = host
        self.lane: Endpoint = ("chain", int(lane))
        source = env.rng("pow_mining", int(lane)) if interval == "exponential" else FixedInterval()
        self.start = env.now
        self.chain = Chain(params, source, start=self.start)
        self._shown = 0  # blocks below this index are on the trace lane already (or were empty)

    def seat_committee(self, propagation_s: float) -> None:
        """The committee is known before the first write: blocks reach its farthest member in ``propagation_s``."""
        if self.chain.found or self._shown:
            raise RuntimeError("Ledger: the committee is seated before the chain is first written to")
        self.chain.params = dataclasses.replace(self.chain.params, propagation_s=float(propagation_s))

    def submit(self, size_bytes: int, what: str, **args: Any) -> Receipt:
        """Write ``size_bytes`` to the chain now; where and when they land (see :class:`~hierfl.core.chain.Chain`)."""
        env, tel = self.env, self.env.telemetry
        receipt = self.chain.submit(env.now, int(size_bytes))
        tel.count("bytes_on_chain", int(size_bytes))
        tel.instant(self.lane, "submit", env.now, what=what, bytes=int(size_bytes), first_block=receipt.first_block,
                    last_block=receipt.last_block, **args)
        for b in range(max(self._shown, receipt.first_block), receipt.last_block + 1):
            begin = self.chain.block_time(b - 1) if b else self.start
            tel.span(self.lane, "block", begin, self.chain.block_time(b) - begin, block=b)
            tel.count("chain_blocks", 1)
        self._shown = max(self._shown, receipt.last_block + 1)
        tel.instant(self.lane, "confirm", receipt.confirmed_at, what=what, block=receipt.last_block, **args)
        return receipt

    def upload(self, device: int, event: str, payload: Any, size_bytes: int, name: str) -> int:
        """Send ``size_bytes`` from ``device`` to the chain host now; ``on_<event>`` fires on arrival."""
        return self.env.send(("device", device), self.host, event, payload, name, size=int(size_bytes))

    def download(self, device: int, event: str, payload: Any, size_bytes: int, name: str) -> int:
        """Send ``size_bytes`` from the chain host to ``device`` now; ``on_<event>`` fires on arrival."""
        return self.env.send(self.host, ("device", device), event, payload, name, size=int(size_bytes))
