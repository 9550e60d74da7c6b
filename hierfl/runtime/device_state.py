"""Persistent per-device state in a device host: named model-sized vectors per device.

A trainer that keeps state on its devices (SCAFFOLD's control ``c``; FedDC's drift ``h`` and
control ``c``) reads and writes it here, by device and name; a vector is zeros until the device's
first job writes it. The host checkpoints it (:meth:`DeviceState.export`), reports its memory
(:meth:`DeviceState.nbytes`) and forgets a device's state on request (:meth:`DeviceState.reset`:
a device that moved to another aggregator starts again from zeros).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DeviceState"]


class DeviceState:
    """``device → {name → float32 vector}`` of the devices one host trains."""

    def __init__(self) -> None:
        self.vectors: dict[int, dict[str, np.ndarray]] = {}

    def __getitem__(self, device: int) -> dict[str, np.ndarray]:
        return self.vectors[device]

    def get(self, device: int, name: str, like: np.ndarray) -> np.ndarray:
        """``device``'s vector ``name`` (zeros shaped like ``like`` before it was first written)."""
        vecs = self.vectors.setdefault(device, {})
        vec = vecs.get(name)
        if vec is None:
            vec = vecs[name] = np.zeros(np.asarray(like).shape, dtype=np.float32)
        return vec

    def put(self, device: int, **vectors: np.ndarray) -> None:
        """Replace some of ``device``'s vectors."""
        self.vectors.setdefault(device, {}).update(vectors)

    def nbytes(self) -> tuple[int, int]:
        """``(devices holding state, bytes of their vectors)``."""
        return len(self.vectors), int(sum(v.nbytes for vecs in self.vectors.values() for v in vecs.values()))

    def reset(self, devices: list[int]) -> None:
        """Forget the state of ``devices``."""
        for device in devices:
            self.vectors.pop(int(device), None)

    def export(self) -> dict[int, dict[str, np.ndarray]]:
        """A copy, for a checkpoint."""
        return {d: {name: np.array(v) for name, v in vecs.items()} for d, vecs in self.vectors.items()}

    def merge(self, states: dict[int, Any]) -> None:
        """Take over :meth:`export`'s value (merged: several hosts' states may be given). A bare vector
        (a checkpoint written before states were named) is SCAFFOLD's ``c``."""
        for d, vecs in states.items():
            named = vecs if isinstance(vecs, dict) else {"c": vecs}
            self.vectors[int(d)] = {name: np.array(v) for name, v in named.items()}
