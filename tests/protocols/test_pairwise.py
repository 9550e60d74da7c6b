"""Locked pairwise exchanges: first come, first served; one exchange per node; void on leave."""

from __future__ import annotations

from hierfl.protocols.pairwise import Exchange, PairwiseExchanges


def test_requests_are_served_in_order_when_both_nodes_are_free() -> None:
    pairs = PairwiseExchanges()
    started: list[tuple[int, int]] = []

    def start(a: int, b: int) -> None:
        started.append((a, b))
        pairs.begin(len(started), Exchange(a, b, {a: "m_a", b: "m_b"}))

    for a, b in ((1, 0), (2, 0), (3, 4), (0, 3)):
        pairs.ask(a, b)
    pairs.serve(start)
    # (1, 0) starts and locks 0; (2, 0) waits; (3, 4) starts; (0, 3) waits for both locks
    assert started == [(1, 0), (3, 4)] and list(pairs.requests) == [(2, 0), (0, 3)]
    assert pairs.arrived(1) is None            # one half of exchange 1
    done = pairs.arrived(1)                     # the other half: complete, 1 and 0 unlocked
    assert done is not None and (done.a, done.b) == (1, 0) and pairs.completed == 1
    pairs.serve(start)
    assert started[-1] == (2, 0) and list(pairs.requests) == [(0, 3)]


def test_a_leaving_node_voids_its_exchange() -> None:
    pairs = PairwiseExchanges()
    pairs.begin(7, Exchange(0, 1, {}, transfers=[11, 12]))
    ex = pairs.void(1)
    assert ex is not None and ex.transfers == [11, 12] and pairs.lock == {} and pairs.active == {}
    assert pairs.void(1) is None and pairs.arrived(7) is None  # a late half of a void exchange is ignored
    assert pairs.completed == 0


def test_serve_called_while_serving_returns_at_once() -> None:
    pairs = PairwiseExchanges()
    seen: list[tuple[int, int]] = []

    def handle(a: int, b: int) -> None:
        seen.append((a, b))
        pairs.serve(handle)  # e.g. a node left while the queue was being served: no second loop

    for req in ((0, 1), (2, 3), (4, 5)):
        pairs.ask(*req)
    pairs.serve(handle)
    assert seen == [(0, 1), (2, 3), (4, 5)] and not pairs.requests
