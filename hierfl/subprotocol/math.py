"""The arithmetic of sub-protocol rounds (numpy-free, standard library only): what one round costs
(:class:`SubRound`), what it is planned from (:class:`RoundView`), message sizes that grow with the
participants, the survivors' threshold, and the cryptographic operations a round may charge at the
senders' and the aggregator's per-tier crypto rates (:data:`CRYPTO_OPS`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from collections.abc import Mapping

__all__ = ["RoundView", "SubRound", "round_bytes", "fraction_threshold", "CRYPTO_OPS", "ops_seconds"]

# The operations a round can charge by count (``SubRound.sender_ops`` / ``server_ops``), each with the unit
# its count is in; a tier's crypto rates (``crypto:`` of a tier in hierfl/profiles/tiers.yaml) give the
# seconds per unit. Key agreements and Shamir field multiply-adds count operations; the symmetric
# ciphers count bytes processed (a PRG expansion, an encryption).
CRYPTO_OPS: dict[str, str] = {
    "ecdh_x25519": "key agreements on Curve25519 (or key generations: one scalar multiplication each)",
    "ecdh_p256": "key agreements on NIST P-256 (or key generations)",
    "aes_ctr": "bytes expanded by AES-CTR (a PRG stream)",
    "aes_gcm": "bytes encrypted or decrypted by AES-GCM",
    "chacha20": "bytes expanded or encrypted by ChaCha20",
    "shamir_muladd": "multiply-adds in Shamir's prime field (sharing or reconstructing a secret)",
}


@dataclass(frozen=True)
class RoundView:
    """What a sub-protocol knows when it plans round ``round`` (0-based) at one aggregation point.

    ``participants``: senders the sub-protocol started with (N); ``alive``: those still taking part
    now; ``dropped``: those lost so far (``participants − alive``); ``dropped_last``: those lost in
    the round before this one; ``model_bytes``: one model message; ``tier``: ``cloud`` or ``edge``;
    ``source``: whether the senders are ``device`` s or ``edge`` servers. ``participant_ids``,
    ``alive_ids`` and ``lost_last_ids``: the same sets by id (sorted), for a sub-protocol whose cost
    depends on who is lost (a neighbour graph); ``instance`` and ``seed``: the instance's number in
    the run and the run's seed, for a sub-protocol that draws from a named stream
    (``hierfl.plugin.rng_stream(seed, name, instance)``). ``field_levels``: when the senders' upload channel
    maps every sender's values onto one shared integer grid (``Channel.field_levels``: quantised before a
    masking sub-protocol sums them), how many integers one value is; None: the model's float values.
    """

    round: int
    participants: int
    alive: int
    dropped: int
    dropped_last: int
    model_bytes: int
    tier: str
    source: str = "device"
    participant_ids: tuple[int, ...] = ()
    alive_ids: tuple[int, ...] = ()
    lost_last_ids: tuple[int, ...] = ()
    instance: int = 0
    seed: int = 0
    field_levels: int | None = None

    @property
    def peers(self) -> int:
        """Other senders still taking part (``alive − 1``): the size of a full-graph neighbourhood."""
        return max(self.alive - 1, 0)


@dataclass(frozen=True)
class SubRound:
    """One round's cost, per sender still taking part.

    ``down_bytes``: the aggregator → sender message (none when 0: the round starts at the sender);
    ``sender_flops`` / ``sender_s``: the sender's work after it (FLOPs at the sender's FLOP/s, or
    seconds; a device's slowdown scales both); ``up_bytes``: the sender → aggregator message (none
    when 0); ``server_flops`` / ``server_s``: the aggregator's work once every sender is in (at
    ``servers.<tier>``'s FLOP/s). ``keeps_lost_inputs``: a participant lost during this round keeps
    its input in the aggregate (it no longer counts towards the threshold). ``sender_ops`` /
    ``server_ops``: ``(operation, count)`` pairs of :data:`CRYPTO_OPS`, charged at the sender's tier's and
    the aggregator's tier's crypto rates, in order (each a span of its own on the timeline), on top of
    the seconds and FLOPs.
    """

    name: str
    up_bytes: int = 0
    down_bytes: int = 0
    sender_flops: float = 0.0
    sender_s: float = 0.0
    server_flops: float = 0.0
    server_s: float = 0.0
    keeps_lost_inputs: bool = False
    sender_ops: tuple[tuple[str, float], ...] = ()
    server_ops: tuple[tuple[str, float], ...] = ()


def round_bytes(constant: int, per_peer: int, model_fraction: float, peers: int, model_bytes: int) -> int:
    """``constant + per_peer · peers + round(model_fraction · model_bytes)``: one message of a round, whose
    size may grow with the other participants (one key share each, Bonawitz et al., CCS 2017) and the model."""
    return int(constant + per_peer * peers + round(model_fraction * model_bytes))


def fraction_threshold(participants: int, minimum: int, fraction: float) -> int:
    """``max(minimum, ⌈fraction · participants⌉)`` (a small epsilon keeps 2/3 · 3 at 2)."""
    return max(int(minimum), math.ceil(fraction * participants - 1e-9))


def ops_seconds(ops: tuple[tuple[str, float], ...], seconds_per_unit: Mapping[str, float]) -> list[tuple[str, float]]:
    """``(operation, seconds)`` of each ``(operation, count)`` at a tier whose rates give ``seconds_per_unit``
    (§0.2 of the cost framework: ``time = count / rate(op, tier)``)."""
    out = []
    for op, count in ops:
        if op not in CRYPTO_OPS:
            raise ValueError(f"unknown crypto operation {op!r}; allowed: {', '.join(CRYPTO_OPS)}")
        out.append((op, float(count) * float(seconds_per_unit[op])))
    return out
