"""What one message carries: named parts laid out one after another in a flat vector, with their sizes.

A model message is a flat float32 vector. A method that sends more than the model with it (a control
variate, a learned step size per parameter, an input offset) declares the message's **layout**: the
parts in order, each with its length and its bytes per value on the wire, and how an aggregator
combines it. The layout then sizes every transfer (:meth:`MessageLayout.nbytes`), gives the width of a job's
result (:meth:`MessageLayout.width`), and packs and unpacks the vector by name (:meth:`MessageLayout.join`,
:meth:`MessageLayout.split`) on both ends, so that no code slices ``[model; control]`` by convention.

Two ways an aggregator combines a part (:attr:`Part.combine`):

* ``"mean"`` — averaged with the model, with the same weights (a part that belongs to the model,
  e.g. learned per-parameter step sizes);
* ``"coef"`` — summed apart, each sender's part scaled by the coefficient that came with it
  (``Σ κ_i Δc_i``: the control deltas of control variates, Karimireddy et al. 2020), and handed to the
  server's own rule rather than averaged into the model.

Pure numpy: the simulation kernel and the loader import it without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["Part", "MessageLayout", "MODEL", "MODEL_ONLY", "CONTROLLED"]

MODEL = "model"


@dataclass(frozen=True)
class Part:
    """One part of a message.

    ``length``: its number of values (None: one model's length, the model's parameter count);
    ``itemsize``: bytes per value on the wire (4: float32); ``combine``: how an aggregator combines it
    (``"mean"`` with the model's weights, or ``"coef"``: a coefficient-weighted sum kept apart).
    """

    name: str
    length: int | None = None
    itemsize: int = 4
    combine: Literal["mean", "coef"] = "mean"

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"a message part's name must be an identifier, got {self.name!r}")
        if self.length is not None and (not isinstance(self.length, int) or self.length < 0):
            raise ValueError(f"part {self.name!r}: length must be an int >= 0 or None (model-sized), got {self.length!r}")
        if self.itemsize <= 0:
            raise ValueError(f"part {self.name!r}: itemsize must be > 0, got {self.itemsize!r}")
        if self.combine not in ("mean", "coef"):
            raise ValueError(f"part {self.name!r}: combine must be 'mean' or 'coef', got {self.combine!r}")

    def values(self, num_params: int) -> int:
        """How many values the part holds for a model of ``num_params`` parameters."""
        return int(num_params) if self.length is None else self.length


@dataclass(frozen=True)
class MessageLayout:
    """The parts of a message, in order; the first is the model itself (model-sized, averaged)."""

    parts: tuple[Part, ...] = (Part(MODEL),)

    def __post_init__(self) -> None:
        if not self.parts or self.parts[0] != Part(MODEL):
            raise ValueError(f"a message layout starts with the model, Part({MODEL!r}); got {self.parts!r}")
        names = [p.name for p in self.parts]
        if len(set(names)) != len(names):
            raise ValueError(f"message part names must be unique, got {names}")

    @property
    def names(self) -> tuple[str, ...]:
        """The parts' names, in order."""
        return tuple(p.name for p in self.parts)

    @property
    def extra(self) -> bool:
        """Whether the message carries more than the model."""
        return len(self.parts) > 1

    def part(self, name: str) -> Part:
        """The part called ``name``."""
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(f"no message part {name!r}; parts: {', '.join(self.names)}")

    def width(self, num_params: int) -> int:
        """Values in the flat vector of a model of ``num_params`` parameters."""
        return sum(p.values(num_params) for p in self.parts)

    def nbytes(self, num_params: int) -> int:
        """Bytes of one message on the wire."""
        return sum(p.values(num_params) * p.itemsize for p in self.parts)

    def num_params_of(self, width: int) -> int:
        """The model's parameter count of a flat vector of ``width`` values (the inverse of :meth:`width`)."""
        fixed = sum(p.length for p in self.parts if p.length is not None)
        scaled = sum(1 for p in self.parts if p.length is None)
        n, rest = divmod(int(width) - fixed, scaled)
        if rest or n < 0:
            raise ValueError(f"a vector of {width} values is not a message of parts {', '.join(self.names)} "
                             f"({scaled} model-sized, {fixed} fixed values)")
        return n

    def slices(self, num_params: int) -> dict[str, slice]:
        """Where each part sits in the flat vector."""
        out: dict[str, slice] = {}
        at = 0
        for p in self.parts:
            k = p.values(num_params)
            out[p.name] = slice(at, at + k)
            at += k
        return out

    def split(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """The parts of a flat message, by name (views into ``vector``)."""
        vec = np.asarray(vector)
        return {name: vec[s] for name, s in self.slices(self.num_params_of(vec.shape[0])).items()}

    def join(self, parts: Mapping[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        """The flat message of ``parts`` (every part named once), written into ``out`` when given."""
        missing = [n for n in self.names if n not in parts]
        unknown = [n for n in parts if n not in self.names]
        if missing or unknown:
            raise ValueError(f"join needs exactly the parts {', '.join(self.names)}; missing {missing}, unknown {unknown}")
        num_params = int(np.asarray(parts[MODEL]).shape[0])
        for name, s in self.slices(num_params).items():
            got = int(np.asarray(parts[name]).shape[0])
            if got != s.stop - s.start:
                raise ValueError(f"part {name!r} has {got} values, the layout wants {s.stop - s.start}")
        if out is None:
            return np.concatenate([np.asarray(parts[n]) for n in self.names])
        for name, s in self.slices(num_params).items():
            out[s] = parts[name]
        return out


MODEL_ONLY = MessageLayout()
"""A message that is the model alone (every method's default)."""

CONTROLLED = MessageLayout((Part(MODEL), Part("control", combine="coef")))
"""A message of control variates (``env.controls``): the model and a model-sized control vector — down the
server's control ``c``, up the device's κ-weighted control delta ``Δc_i`` (summed apart by the aggregator)."""
