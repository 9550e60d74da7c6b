"""Shared check for bad-input tests: a scenario the CLI must refuse with exit 2, naming the key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hierfl.cli import main


def assert_refused(tmp_path: Path, capsys: Any, raw: dict[str, Any], key: str) -> None:
    """``hierfl run`` of ``raw`` exits 2, names ``key`` without a traceback, and writes no run."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())
