"""Named random streams: every consumer draws from its own stream derived from ``(seed, name, ids)``.

There is no global RNG state anywhere in hierfl. A stream's identity is a stable hash of its
name (not Python's salted ``hash``) plus integer ids, fed to numpy's ``SeedSequence`` as a spawn
key, so streams are independent, reproducible across processes and machines, and adding a new
consumer never shifts the draws of an existing one.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

__all__ = ["stream", "stream_seed", "generator_state", "generator_from_state"]


def _name_key(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=4).digest(), "little")


def _seed_sequence(seed: int, name: str, ids: tuple[int, ...]) -> np.random.SeedSequence:
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    key = (_name_key(name), *(int(i) for i in ids))
    if any(k < 0 for k in key):
        raise ValueError(f"stream ids must be >= 0, got {ids}")
    return np.random.SeedSequence(entropy=int(seed), spawn_key=key)


def stream(seed: int, name: str, *ids: int) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` for stream ``name`` with integer ``ids``."""
    return np.random.Generator(np.random.PCG64(_seed_sequence(seed, name, ids)))


def stream_seed(seed: int, name: str, *ids: int) -> int:
    """A 63-bit integer seed for consumers that take an int (torch generators, training jobs)."""
    return int(_seed_sequence(seed, name, ids).generate_state(2, np.uint32).view(np.uint64)[0] >> 1)


def generator_state(gen: np.random.Generator) -> dict[str, Any]:
    """The serialisable position of a generator (for checkpoints)."""
    return dict(gen.bit_generator.state)


def generator_from_state(state: dict[str, Any]) -> np.random.Generator:
    """Rebuild a generator at the position saved by :func:`generator_state`."""
    bg = np.random.PCG64()
    bg.state = state  # type: ignore[assignment]
    return np.random.Generator(bg)
