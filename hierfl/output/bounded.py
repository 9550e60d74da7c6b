"""Bounded output lines (scale, "no metrics line grows with N").

An aggregation line lists what each update contributed (``ids``, ``weights``, ``staleness``,
``participants``, a round's ``dropped_ids``): with 10^5 devices behind 20 edge servers that is
thousands of entries per line and per trace event. A list longer than ``output.list_limit``
(default 200) is written as a summary object instead: ``{"count": n, "min": …, "max": …, "mean":
…}`` for a list of numbers, ``{"count": n}`` otherwise. Shorter lists are written whole, so runs
whose lists never exceed the limit (every run of up to 200 devices) write exactly what they did.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bound_lists", "summary_of"]

_NUMBERS = (int, float)


def summary_of(values: list[Any]) -> dict[str, Any]:
    """``{"count", "min", "max", "mean"}`` of a list of numbers (``{"count"}`` for anything else)."""
    out: dict[str, Any] = {"count": len(values)}
    # every value an int or float (subclasses too, bool excepted), checked once per distinct type
    if values and all(issubclass(t, _NUMBERS) and not issubclass(t, bool) for t in set(map(type, values))):
        out.update(min=min(values), max=max(values), mean=sum(values) / len(values))
    return out


def bound_lists(fields: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """``fields`` with every list value longer than ``limit`` as its :func:`summary_of` (nested dicts
    too); ``fields`` itself when nothing is that long, or ``limit`` is None (whole lists)."""
    if limit is None:
        return fields
    out = None
    for key, value in fields.items():
        t = type(value)
        if (t is list or t is tuple) and len(value) > limit:
            new: Any = summary_of(list(value))
        elif t is dict:
            new = bound_lists(value, limit)
            if new is value:
                continue
        else:
            continue
        if out is None:
            out = dict(fields)
        out[key] = new
    return fields if out is None else out
