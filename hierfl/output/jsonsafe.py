"""JSON-safe values: numpy scalars to Python, NaN/inf to None (every writer uses it).

:func:`clean` rebuilds a value recursively. Most values the run writes (trace arguments, metric
lines) are already plain — Python ints, finite floats, strings, lists of them — and for those the
rebuilt value encodes to exactly the same JSON text as the value itself. :func:`is_plain` says so
cheaply (C-level scans for lists), and :func:`jsonable` skips the rebuild then (scale: on the
timing-only asynchronous hierarchical benchmark ``clean`` cost more than the JSON encoding it prepared).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["clean", "is_plain", "jsonable"]

# exact types whose values clean() returns unchanged (subclasses such as numpy.float64 are not plain:
# clean turns them into Python numbers)
_SCALARS = frozenset({str, int, bool, type(None)})
_NUMBERS = frozenset({float, int, bool})


def clean(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and non-finite floats as None, recursively."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def is_plain(value: Any) -> bool:
    """Whether ``json`` encodes ``value`` exactly as it encodes ``clean(value)``.

    True when every value inside is a ``str``, ``int``, ``bool``, ``None`` or finite ``float`` of
    exactly those types, in dicts, lists and tuples (a tuple encodes as the list ``clean`` makes of
    it; dict keys are left to ``json`` by both). False may be conservative: the caller then cleans.
    """
    t = type(value)
    if t in _SCALARS:
        return True
    if t is float:
        return value - value == 0.0  # x − x is 0 for a finite x, NaN for ±inf and NaN
    if t is dict:
        return all(map(is_plain, value.values()))
    if t is list or t is tuple:
        types = set(map(type, value))  # one C-level pass: a list of ids or weights needs no Python loop
        if types <= _SCALARS:
            return True
        if types <= _NUMBERS:
            try:
                # a non-finite element makes the sum non-finite (inf + x = inf, inf − inf = NaN, NaN
                # propagates), so a finite sum proves every element finite; an overflowing sum of finite
                # values proves nothing and falls through to the element-wise check
                if math.isfinite(sum(value)):
                    return True
            except OverflowError:  # an int too large for a float
                pass
        return all(map(is_plain, value))
    return False


def jsonable(value: Any) -> Any:
    """``value`` itself when it is plain (:func:`is_plain`), else ``clean(value)``: the same JSON text."""
    return value if is_plain(value) else clean(value)
