"""What secure aggregation costs, round by round (the standard library only).

SecAgg (Bonawitz et al., CCS 2017) runs four message rounds between a server and its clients —
AdvertiseKeys, ShareKeys, MaskedInputCollection, Unmasking — and SecAgg+ (Bell et al., CCS 2020) the same
four over a sparse neighbour graph (a random Harary graph of degree ``k``) instead of the complete one.
This module holds the message sizes of the production encoding (P-256 keys of 33 B, AES-256-GCM, Shamir
shares of 36 B, masked vectors packed at ``b`` bits per element), the operation counts of each round,
the neighbour graph and the degree / threshold finder of SecAgg+. Every figure carries the tag of the
design spec it comes from: [V] verified in a named source, [B] a reading, [D] a design default (each
[D] is a knob of the sub-protocol's config).

Counts, for a client ``u`` with ``k_r`` neighbours still taking part in round ``r`` (all other clients in
SecAgg, its graph neighbours in SecAgg+), ``m`` elements in the masked vector, ``t`` the threshold:

* R0 AdvertiseKeys: up ``74`` B [B framing of 2 × 33 B keys]; 2 key generations.
* R1 ShareKeys: down ``72·k1 + 45`` B (the neighbours' key pairs, a 32 B session id); 2·k1 key agreements,
  Shamir sharing of 2 secrets of 9 sub-secrets to ``k1 + 1`` holders: ``2·9·(k1+1)·(t−1)`` multiply-adds,
  ``k1`` AES-GCM encryptions of 76 B; up ``106·k1`` B (one 104 B ciphertext and framing per neighbour).
* R2 MaskedInputCollection: down ``106·k2`` B (the ciphertexts addressed to ``u``); ``k2`` decryptions of
  76 B, ``k2 + 1`` PRG streams of ``m·⌈b/8⌉`` bytes, ``(k2 + 1)·m`` modular adds; up ``⌈m·b/8⌉ + 8`` B.
* R3 Unmasking: down ``4·dead + 8`` B (the neighbours lost in R2); up ``40`` B per neighbour that reached R2.
  The server rebuilds one secret per client of U2 (``9·t`` multiply-adds each, after ``t²`` for the
  Lagrange coefficients), expands ``|U3| + Σ_{v lost in R2} |N(v) ∩ U3|`` PRG streams, runs one key
  agreement per (lost client, surviving neighbour) pair and adds ``m`` elements per masked vector and
  per stream.

Every message also carries a fixed 64-byte envelope [D]. Modular adds are element operations charged as
one FLOP each at a quarter of the processor's FLOP/s (memory-bound vector work) [D].
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ROUNDS", "ENVELOPE_BYTES", "SUBSECRETS", "PAIR_PLAINTEXT_BYTES", "RoundCost", "default_bits",
           "full_threshold", "harary_neighbours", "find_degree_threshold", "client_round", "server_unmask",
           "hypergeom_upper_tail", "hypergeom_lower_cdf"]

ROUNDS = ("advertise_keys", "share_keys", "masked_input", "unmasking")
ENVELOPE_BYTES = 64            # [D] headers / ids on every message
SUBSECRETS = 9                 # [V arithmetic] a 32 B secret in 31-bit sub-secrets: ⌈256/31⌉
PAIR_PLAINTEXT_BYTES = 76      # [B] two 36 B shares with proto framing
R0_UP = 74                     # [B] two 33 B public keys with framing
R1_DOWN_PER, R1_DOWN = 72, 45  # [B] a neighbour's key pair; the 32 B session id and framing
R1_UP_PER = 106                # [B] a 104 B AES-GCM ciphertext (12 B IV + 76 B + 16 B tag) with framing
R2_DOWN_PER = 106              # [B] the ciphertexts addressed to the client
R2_UP = 8                      # [B] framing of the masked vector
R3_DOWN_PER, R3_DOWN = 4, 8    # [B] the ids of the neighbours lost in R2
R3_UP_PER = 40                 # [B] one 36 B share with framing
ADD_EFFICIENCY = 0.25          # [D] modular adds: memory-bound element operations


@dataclass(frozen=True)
class RoundCost:
    """One message round for one client: bytes down / up, its crypto operations and FLOPs, the server's."""

    name: str
    down: int = 0
    up: int = 0
    client_ops: tuple[tuple[str, float], ...] = ()
    client_flops: float = 0.0
    server_ops: tuple[tuple[str, float], ...] = ()
    server_flops: float = 0.0


def default_bits(participants: int, quant_levels: int) -> int:
    """``b = ⌈log2(n · Q)⌉`` (headroom for the sum of ``n`` inputs of ``Q`` levels), at most 62 [D, §1.8]."""
    return min(62, max(1, math.ceil(math.log2(max(participants, 1) * quant_levels))))


def full_threshold(n: int) -> int:
    """SecAgg's default threshold ``min(n, ⌈2n/3⌉ + 1)`` [D] (tolerates a third lost, the paper's headline)."""
    return min(n, math.ceil(2 * n / 3 - 1e-9) + 1)


def harary_neighbours(order: Sequence[int], degree: int) -> dict[int, tuple[int, ...]]:
    """The Harary graph of even ``degree`` on the ring ``order``: each client's ``degree/2`` nearest ring
    positions on each side [V: FCP's secret-sharing Harary graph]; the complete graph when ``degree ≥ n − 1``."""
    n = len(order)
    if degree >= n - 1:
        return {u: tuple(sorted(v for v in order if v != u)) for u in order}
    half = degree // 2
    out = {}
    for i, u in enumerate(order):
        out[u] = tuple(sorted({order[(i + s) % n] for s in range(-half, half + 1) if s != 0}))
    return out


# -- SecAgg+'s degree and threshold (σ = 40, η = 20) --------------------------------------------------------

def _log_pmf(total: int, marked: int, sampled: int, x: int) -> float:
    """log P[X = x], X ~ Hypergeometric(total, marked, sampled)."""
    lg = math.lgamma
    return (lg(marked + 1) - lg(x + 1) - lg(marked - x + 1) + lg(total - marked + 1) - lg(sampled - x + 1)
            - lg(total - marked - sampled + x + 1) - lg(total + 1) + lg(sampled + 1) + lg(total - sampled + 1))


def _pmf(total: int, marked: int, sampled: int) -> list[float]:
    """P[X = x] for x = 0 … sampled (0 outside the support)."""
    lo, hi = max(0, sampled - (total - marked)), min(sampled, marked)
    return [math.exp(_log_pmf(total, marked, sampled, x)) if lo <= x <= hi else 0.0 for x in range(sampled + 1)]


def hypergeom_upper_tail(total: int, marked: int, sampled: int, x: int) -> float:
    """P[X ≥ x], summed over the tail itself (accurate far out in it)."""
    return sum(_pmf(total, marked, sampled)[max(x, 0):])


def hypergeom_lower_cdf(total: int, marked: int, sampled: int, x: int) -> float:
    """P[X ≤ x], summed over the tail itself."""
    return sum(_pmf(total, marked, sampled)[:max(x + 1, 0)])


def find_degree_threshold(n: int, corrupt: float, dropout: float, semi_malicious: bool = False,
                          sigma: float = 40.0, eta: float = 20.0) -> tuple[int, int] | None:
    """The smallest even degree ``k`` (and its threshold ``t``) of a random Harary graph on ``n`` clients that
    is secure (bad event ≤ 2^−σ) and correct (failure ≤ 2^−η) with a ``corrupt`` share of corrupt clients and a
    ``dropout`` share of dropouts, or None (Bell et al. 2020; the production finder's checks, §2.2):

    1. the graph without the ``⌊γn⌋ + ⌊δn⌋`` bad clients stays connected (a union bound over pairs of
       ``k/2``-long gaps in the ring) with probability ≥ 1 − 2^−(σ+1);
    2. ``t1``: the largest count of corrupt neighbours reached with probability ≥ 2^−(σ+1)/n;
       ``t2``: the smallest count of surviving neighbours with P[≤ t2] ≥ 2^−η/n;
    3. semi-malicious server: ``t1 ← ⌈(t1 + k − 1.25)/2⌉``; accept when ``t2 > t1``, ``t = max(t1 + 1, 2)``.
    """
    small = 1e-14
    bad_corrupt = math.floor((corrupt + small) * n)
    survivors = math.ceil((1 - dropout - small) * n)
    bad = bad_corrupt + math.floor((dropout + small) * n)
    eps_sec = 2.0 ** -(sigma + 1) / n
    eps_cor = 2.0 ** -eta / n
    for k in range(2, n - 1, 2):
        if k <= bad:  # 1. disconnection bound
            log_p = (math.log(n) + math.log(n - k - 1) - math.log(2) + math.lgamma(bad + 1)
                     + math.lgamma(n - k + 1) - math.lgamma(n + 1) - math.lgamma(bad - k + 1))
            if log_p >= -(sigma + 1) * math.log(2):
                continue
        corrupt_pmf, tail = _pmf(n, bad_corrupt, k), 0.0
        t1 = 0
        for x in range(k, -1, -1):  # the tail P[X ≥ x], summed from its far end
            tail += corrupt_pmf[x]
            if tail >= eps_sec:
                t1 = x
                break
        survive_pmf, head = _pmf(n, survivors, k), 0.0
        t2 = k
        for x in range(k + 1):
            head += survive_pmf[x]
            if head >= eps_cor:
                t2 = x
                break
        if semi_malicious:
            t1 = math.ceil((t1 + k - 1.25) / 2)
        if t2 > t1:
            return k, max(t1 + 1, 2)
    return None


# -- one round's cost ---------------------------------------------------------------------------------------

def client_round(r: int, k: int, t: int, m: int, bits: int, ka: str, prg: str, dead: int = 0) -> RoundCost:
    """Round ``r``'s bytes and work at a client with ``k`` neighbours taking part (R3: ``k`` neighbours that
    reached R2, ``dead`` of them lost in it); ``ka`` / ``prg``: the key-agreement and PRG operations."""
    env = ENVELOPE_BYTES
    if r == 0:
        return RoundCost(ROUNDS[0], up=R0_UP + env, client_ops=((ka, 2),))
    if r == 1:
        return RoundCost(ROUNDS[1], down=R1_DOWN_PER * k + R1_DOWN + env, up=R1_UP_PER * k + env,
                         client_ops=((ka, 2 * k), ("shamir_muladd", 2 * SUBSECRETS * (k + 1) * (t - 1)),
                                     ("aes_gcm", PAIR_PLAINTEXT_BYTES * k)))
    if r == 2:
        return RoundCost(ROUNDS[2], down=R2_DOWN_PER * k + env, up=math.ceil(m * bits / 8) + R2_UP + env,
                         client_ops=(("aes_gcm", PAIR_PLAINTEXT_BYTES * k), (prg, (k + 1) * m * math.ceil(bits / 8))),
                         client_flops=(k + 1) * m / ADD_EFFICIENCY)
    return RoundCost(ROUNDS[3], down=R3_DOWN_PER * dead + R3_DOWN + env, up=R3_UP_PER * k + env)


def server_unmask(survivors: Sequence[int], lost: Sequence[int], neighbours: Mapping[int, Sequence[int]], t: int,
                  m: int, bits: int, ka: str, prg: str) -> RoundCost:
    """The server's work at the end of Unmasking: ``survivors`` (U3) sent masked inputs, ``lost`` (U2 ∖ U3)
    shared keys but sent none."""
    alive = set(survivors)
    pairs = sum(sum(1 for w in neighbours[v] if w in alive) for v in lost)
    streams = len(survivors) + pairs
    secrets = len(survivors) + len(lost)
    return RoundCost(ROUNDS[3], server_ops=(("shamir_muladd", t * t + SUBSECRETS * t * secrets), (ka, pairs),
                                            (prg, streams * m * math.ceil(bits / 8))),
                     server_flops=(len(survivors) + streams) * m / ADD_EFFICIENCY)
