"""Locked pairwise exchanges: the bookkeeping of asynchronous gossip (Lian et al.,
"Asynchronous Decentralized Parallel Stochastic Gradient Descent", ICML 2018).

A node asks a partner for an exchange; requests wait first come, first served, and an exchange
starts only when neither node is in another one (each node holds one lock). An exchange is two
messages sent at once, one each way; it is complete when both have arrived, and void when one of
its nodes leaves. What the nodes send and do with what they receive is the protocol's business; this
class only keeps the queue, the locks and the exchanges.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Exchange", "PairwiseExchanges"]


@dataclass
class Exchange:
    """One exchange between ``a`` (who asked) and ``b``: the models each sent, the transfers, halves left."""

    a: int
    b: int
    sent: dict[int, Any]
    transfers: list[int] = field(default_factory=list)
    left: int = 2


class PairwiseExchanges:
    """Requests (FIFO), locks (one exchange per node) and the exchanges in progress, by id."""

    def __init__(self) -> None:
        self.requests: deque[tuple[int, int]] = deque()
        self.active: dict[int, Exchange] = {}
        self.lock: dict[int, int] = {}   # node → the exchange it is in
        self.completed = 0
        self._serving = False

    def ask(self, a: int, b: int) -> None:
        """``a`` asks ``b`` for an exchange (served in the order asked)."""
        self.requests.append((a, b))

    def serve(self, handle: Callable[[int, int], None]) -> None:
        """Hand every queued request whose two nodes are free to ``handle(a, b)``, in request order
        (``handle`` starts the exchange with :meth:`begin`, or drops the request); a request with a
        locked node waits. A call made while serving (a node left meanwhile) returns at once: the
        loop already running goes on with the queue."""
        if self._serving:
            return
        self._serving = True
        try:
            kept: deque[tuple[int, int]] = deque()
            while self.requests:
                a, b = self.requests.popleft()
                if a in self.lock or b in self.lock:
                    kept.append((a, b))
                else:
                    handle(a, b)
            self.requests = kept
        finally:
            self._serving = False

    def begin(self, ex_id: int, exchange: Exchange) -> None:
        """Exchange ``ex_id`` started: both its nodes are locked until it completes or is void."""
        self.active[ex_id] = exchange
        self.lock[exchange.a] = self.lock[exchange.b] = ex_id

    def arrived(self, ex_id: int) -> Exchange | None:
        """One half of exchange ``ex_id`` arrived: the exchange, unlocked, once both have (else None)."""
        ex = self.active.get(ex_id)
        if ex is None:
            return None
        ex.left -= 1
        if ex.left:
            return None
        del self.active[ex_id]
        del self.lock[ex.a], self.lock[ex.b]
        self.completed += 1
        return ex

    def void(self, node: int) -> Exchange | None:
        """``node`` left: the exchange it was in (if any) is void and both its nodes are free again."""
        ex_id = self.lock.get(node)
        if ex_id is None:
            return None
        ex = self.active.pop(ex_id)
        del self.lock[ex.a], self.lock[ex.b]
        return ex
