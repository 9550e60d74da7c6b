"""Secure aggregation's masking arithmetic, for real, on small vectors (numpy and the standard library only).

Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017, §4:
each client ``u`` masks its input ``x_u`` (integers mod ``R = 2^b``) as

    y_u = x_u + PRG(b_u) + Σ_{v ∈ N(u) ∩ U2} δ_uv · PRG(s_uv)   (mod R),   δ_uv = +1 if u > v else −1,

with ``b_u`` a self-mask seed and ``s_uv = KA(s_sk_u, s_pk_v)`` a pairwise seed both ends derive; it
Shamir-shares ``b_u`` and ``s_sk_u`` among its neighbours (threshold ``t``). The server sums the
``y_u`` it received (set U3): the pairwise masks of two survivors cancel; for each survivor it
rebuilds ``b_u`` from ``t`` shares and removes ``PRG(b_u)``; for each client that shared its keys but
sent no masked input (U2 ∖ U3) it rebuilds ``s_sk_v`` and removes the masks ``v`` shared with
surviving neighbours. It never asks for both secrets of one client. Fewer than ``t`` survivors: abort.

This module does the arithmetic exactly but with stand-in primitives, chosen so the arithmetic is
checkable, not secure: Diffie–Hellman in the multiplicative group mod the Mersenne prime ``2^127 − 1``
for the key agreement, Shamir sharing over the same prime field, and numpy's PCG64 seeded by a
BLAKE2b digest of the seed as the PRG. The emulator charges the costs of the real primitives
(P-256, AES-CTR; :mod:`hierfl.methods.secagg.math`); nothing here is used in a run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["PRIME", "GENERATOR", "Client", "prg", "share", "reconstruct", "keygen", "agree", "mask",
           "aggregate", "SecAggAbort"]

PRIME = (1 << 127) - 1   # a Mersenne prime: the DH group's modulus and Shamir's field
GENERATOR = 3


class SecAggAbort(RuntimeError):
    """Fewer survivors than the threshold: the instance aborts (§4, Round 3)."""


def keygen(rng: np.random.Generator) -> tuple[int, int]:
    """A key pair ``(sk, pk = g^sk mod p)``."""
    sk = int(rng.integers(2, 1 << 62)) << 64 | int(rng.integers(0, 1 << 62))
    return sk, pow(GENERATOR, sk, PRIME)


def agree(sk: int, pk: int) -> int:
    """The shared secret ``pk^sk mod p`` (both ends get the same one)."""
    return pow(pk, sk, PRIME)


def prg(seed: int, m: int, modulus: int) -> np.ndarray:
    """``m`` elements uniform in ``[0, modulus)`` expanded from ``seed`` (uint64)."""
    digest = hashlib.blake2b(int(seed).to_bytes(16, "little"), digest_size=16).digest()
    gen = np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little")))
    return gen.integers(0, modulus, size=m, dtype=np.uint64)


def share(secret: int, t: int, holders: Sequence[int], rng: np.random.Generator) -> dict[int, int]:
    """Shamir ``t``-of-``len(holders)`` shares of ``secret``: holder ``h`` gets ``f(h + 1)``, ``f`` of degree ``t − 1``."""
    coefs = [secret % PRIME] + [int(rng.integers(0, 1 << 62)) << 64 | int(rng.integers(0, 1 << 62))
                                for _ in range(t - 1)]
    out = {}
    for h in holders:
        x, acc = h + 1, 0
        for c in reversed(coefs):  # Horner
            acc = (acc * x + c) % PRIME
        out[h] = acc
    return out


def reconstruct(shares: Mapping[int, int], t: int) -> int:
    """The secret from at least ``t`` shares (Lagrange interpolation at 0)."""
    if len(shares) < t:
        raise SecAggAbort(f"{len(shares)} shares, threshold {t}")
    points = sorted(shares.items())[:t]
    secret = 0
    for i, (hi, yi) in enumerate(points):
        num, den = 1, 1
        for j, (hj, _) in enumerate(points):
            if i != j:
                num = num * (-(hj + 1)) % PRIME
                den = den * ((hi + 1) - (hj + 1)) % PRIME
        secret = (secret + yi * num * pow(den, PRIME - 2, PRIME)) % PRIME
    return secret


class Client:
    """One client's keys, self-mask seed and the shares it holds of its neighbours' secrets."""

    def __init__(self, ident: int, rng: np.random.Generator) -> None:
        self.ident = ident
        self.s_sk, self.s_pk = keygen(rng)
        self.b = int(rng.integers(0, 1 << 62)) << 64 | int(rng.integers(0, 1 << 62))
        self.held_b: dict[int, int] = {}      # neighbour → my share of its b
        self.held_sk: dict[int, int] = {}     # neighbour → my share of its s_sk

    def share_keys(self, neighbours: Sequence[int], t: int, rng: np.random.Generator
                   ) -> tuple[dict[int, int], dict[int, int]]:
        """Shares of ``b`` and ``s_sk`` for ``neighbours`` and itself (Round 1)."""
        holders = sorted({*neighbours, self.ident})
        return share(self.b, t, holders, rng), share(self.s_sk, t, holders, rng)


def mask(client: Client, x: np.ndarray, pks: Mapping[int, int], modulus: int) -> np.ndarray:
    """``y_u`` of Round 2: ``x`` plus its self mask and ``±`` the pairwise masks with ``pks``' owners."""
    m = len(x)
    y = (np.asarray(x, dtype=np.uint64) + prg(client.b, m, modulus)) % np.uint64(modulus)
    for v, pk in sorted(pks.items()):
        p = prg(agree(client.s_sk, pk), m, modulus)
        y = (y + p) % np.uint64(modulus) if client.ident > v else (y + np.uint64(modulus) - p) % np.uint64(modulus)
    return y


def aggregate(inputs: Mapping[int, np.ndarray], neighbours: Mapping[int, Sequence[int]], t: int, modulus: int,
              lost_before_masking: Sequence[int] = (), lost_after_sharing: Sequence[int] = (),
              seed: int = 0) -> np.ndarray:
    """Run the four rounds over ``inputs`` (client → integer vector mod ``modulus``) and return the sum
    the server unmasks: Σ x_u over the clients that sent a masked input.

    ``lost_before_masking``: clients gone after sharing their keys in Round 1 but before anyone masks (they
    are in U2 for nobody: the others mask without them); ``lost_after_sharing``: clients that shared and
    whose masked input never arrives (U2 ∖ U3: the server rebuilds their masking keys). Raises
    :class:`SecAggAbort` when fewer than ``t`` clients are left to unmask.
    """
    rng = np.random.default_rng(seed)
    ids = sorted(inputs)
    clients = {u: Client(u, rng) for u in ids}
    for u in ids:  # Round 1: every client shares its two secrets with its neighbours (and itself)
        b_sh, sk_sh = clients[u].share_keys(neighbours[u], t, rng)
        for h in b_sh:
            clients[h].held_b[u], clients[h].held_sk[u] = b_sh[h], sk_sh[h]
    u2 = [u for u in ids if u not in set(lost_before_masking)]
    u3 = [u for u in u2 if u not in set(lost_after_sharing)]
    if len(u3) < t:
        raise SecAggAbort(f"{len(u3)} survivors, threshold {t}")
    total = np.zeros(len(next(iter(inputs.values()))), dtype=np.uint64)
    for u in u3:  # Round 2: masked inputs (masks with the neighbours still in U2)
        pks = {v: clients[v].s_pk for v in neighbours[u] if v in u2}
        total = (total + mask(clients[u], inputs[u], pks, modulus)) % np.uint64(modulus)
    m = len(total)
    for v in u2:  # Round 3: survivors hand the server one secret's shares per client, never both
        if v in u3:
            b = reconstruct({h: clients[h].held_b[v] for h in u3 if v in clients[h].held_b}, t)
            total = (total + np.uint64(modulus) - prg(b, m, modulus)) % np.uint64(modulus)
        else:
            sk = reconstruct({h: clients[h].held_sk[v] for h in u3 if v in clients[h].held_sk}, t)
            for w in neighbours[v]:
                if w in u3:  # the mask w added for v: +PRG if w > v, else −PRG; take it back out
                    p = prg(agree(sk, clients[w].s_pk), m, modulus)
                    total = ((total + np.uint64(modulus) - p) if w > v else (total + p)) % np.uint64(modulus)
    return total
