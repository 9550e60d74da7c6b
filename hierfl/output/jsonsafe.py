"""JSON-safe values: numpy scalars to Python, NaN/inf to None (every writer uses it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["clean"]


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
