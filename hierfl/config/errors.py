"""User-facing configuration errors: every problem at once, each with file, key path, value and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Problem", "ConfigError"]

_MISSING = object()


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a scenario."""

    path: str                 # dotted key path, e.g. "protocol.fraction"; "" for the whole file
    message: str              # what is wrong and what is allowed
    value: Any = _MISSING     # the offending value, when there is one

    def format(self, source: str | None = None) -> str:
        """``file: key.path: message (got value)``."""
        where = ": ".join(p for p in (source, self.path) if p)
        got = "" if self.value is _MISSING else f" (got {self.value!r})"
        return f"{where}: {self.message}{got}" if where else f"{self.message}{got}"


class ConfigError(Exception):
    """A scenario cannot be loaded; carries every problem found."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(self.report())

    def report(self) -> str:
        """All problems, one per line."""
        head = f"{len(self.problems)} problem(s) in {self.source or 'scenario'}:"
        return "\n".join([head, *("  - " + p.format(self.source) for p in self.problems)])
