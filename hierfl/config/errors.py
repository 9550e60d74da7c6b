"""User-facing configuration errors: every problem at once, each with file, key path, value and what is allowed."""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass
from typing import Any

__all__ = ["Problem", "ConfigError"]

_MISSING = object()

# Error messages show a short prefix of a bad value or key path, never the whole (a 50 MB value
# printed 52 MB of error; a list of a million bad entries gives as many problems): cut here.
MAX_VALUE_CHARS = 80
MAX_PATH_CHARS = 200
MAX_MESSAGE_CHARS = 300
MAX_PROBLEMS = 50

_LONG_QUOTE = re.compile(r"'([^']{%d})[^']+'" % MAX_VALUE_CHARS)

_REPR = reprlib.Repr()
_REPR.maxstring = MAX_VALUE_CHARS
_REPR.maxother = MAX_VALUE_CHARS
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 6
_REPR.maxlevel = 3


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to a short prefix, without building the whole repr of a huge value."""
    return short(_REPR.repr(value), MAX_VALUE_CHARS + 20)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a scenario."""

    path: str                 # dotted key path, e.g. "protocol.fraction"; "" for the whole file
    message: str              # what is wrong and what is allowed
    value: Any = _MISSING     # the offending value, when there is one
    # a refusal by declaration: the value is well formed, but the protocol declares it means nothing there
    # (a straggler policy at an aggregation point that takes none); a sweep may skip such a trial
    refused: bool = False

    def format(self, source: str | None = None) -> str:
        """``file: key.path: message (got value)``."""
        where = ": ".join(p for p in (source, short(self.path, MAX_PATH_CHARS)) if p)
        got = "" if self.value is _MISSING else f" (got {short_repr(self.value)})"
        # pydantic quotes the input inside some messages ("Input tag '…' found using 'dist' …"):
        # cut a long quoted part there, keeping what the message says is allowed
        message = short(_LONG_QUOTE.sub(lambda m: f"'{m.group(1)}…'", self.message), MAX_MESSAGE_CHARS)
        return f"{where}: {message}{got}" if where else f"{message}{got}"


class ConfigError(Exception):
    """A scenario cannot be loaded; carries every problem found."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(self.report())

    def report(self) -> str:
        """All problems, one per line."""
        head = f"{len(self.problems)} problem(s) in {self.source or 'scenario'}:"
        lines = [head, *("  - " + p.format(self.source) for p in self.problems[:MAX_PROBLEMS])]
        if len(self.problems) > MAX_PROBLEMS:
            lines.append(f"  … and {len(self.problems) - MAX_PROBLEMS} more")
        return "\n".join(lines)
