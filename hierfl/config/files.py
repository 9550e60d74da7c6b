"""Where a file named in a scenario (``topology.file``, ``devices.capacity_trace.file``) is found.

A relative path is looked up, in order, in

1. the folder of the scenario file being loaded (passed to pydantic as validation context by
   :func:`hierfl.scenario.loader.validate_raw`; absent when a scenario is built from a dict),
2. the current working directory,
3. hierfl's own checkout (the folder holding the ``hierfl`` package), so the shipped
   ``topologies/`` and ``traces/`` are found from anywhere and a run's ``config.yaml`` runs again.

The first existing file wins; when none exists the error lists every place that was tried.

Validation only *resolves* a file (cheap: does it exist, is it a file). Parsing happens when a
builder or a load-time check needs the content, through :func:`read_cached`, so a file named
in a scenario is parsed once per process however many steps look at it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["resolve_file", "context_for", "display_path", "read_cached"]

T = TypeVar("T")

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def context_for(source: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The pydantic validation context for a scenario read from ``source`` (a file path or None)."""
    if source is None:
        return {}
    path = Path(source)
    return {"scenario_dir": str(path.resolve().parent)} if path.suffix or path.exists() else {}


def _candidates(value: str, context: Mapping[str, Any] | None) -> list[Path]:
    path = Path(value).expanduser()
    if path.is_absolute():
        return [path]
    out: list[Path] = []
    scenario_dir = (context or {}).get("scenario_dir")
    if scenario_dir:
        out.append(Path(scenario_dir) / path)
    out.append(Path.cwd() / path)
    out.append(_PACKAGE_ROOT / path)
    unique: list[Path] = []
    for p in out:
        if p.resolve() not in [u.resolve() for u in unique]:
            unique.append(p)
    return unique


def resolve_file(value: str, context: Mapping[str, Any] | None = None) -> Path:
    """The absolute path of ``value`` (see the module docstring for the search order).

    Raises ``ValueError`` naming every place tried when the file is in none of them, or when
    the path names a directory.
    """
    tried = _candidates(value, context)
    for path in tried:
        if path.is_file():
            return path.resolve()
        if path.is_dir():
            raise ValueError(f"{display_path(path)} is a directory, not a file")
    where = ", ".join(display_path(p) for p in tried)
    raise ValueError(f"file not found: {value} (looked in: {where})")


def display_path(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p.resolve())


@lru_cache(maxsize=128)
def _parsed(parse: Callable[..., Any], path: str, mtime_ns: int, size: int, args: tuple[Any, ...]) -> Any:
    return parse(Path(path), *args)


def read_cached(path: str | os.PathLike[str], parse: Callable[..., T], *args: Any) -> T:
    """``parse(path, *args)``, parsed once per (file, modification time, size, args).

    The result is shared: callers must not mutate it. ``OSError`` from ``stat`` (the file
    vanished) propagates; the parser's own errors are raised again on every call, never cached.
    """
    p = Path(path).resolve()
    st = p.stat()
    return _parsed(parse, str(p), st.st_mtime_ns, st.st_size, args)  # type: ignore[no-any-return]
