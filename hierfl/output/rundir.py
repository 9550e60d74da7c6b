"""The run directory (``--out``): checked before anything is built, never clobbering a user's files.

Rules (reliability):

* ``--out`` naming an existing file, or a place that cannot be created or written, is a
  configuration error (exit 2) reported *before* the data and model are built;
* a directory holding an earlier run (it has a ``metrics.jsonl`` or ``summary.json``, files only
  hierfl writes) is refused unless ``force``; with ``force`` exactly the earlier run's own files
  are replaced (other files are listed, never deleted);
* a non-empty directory that is not a run directory (``--out .`` in a folder with the user's
  own ``config.yaml``) is always refused: a run never overwrites a file it did not write;
* ``resume`` (``hierfl resume RUN_DIR``) reuses a run directory as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from hierfl.output.files import CONTRACT_FILES

__all__ = ["RUN_MARKERS", "RUN_FILES", "RunDirError", "check_out_dir", "prepare_dir", "is_run_dir"]

RUN_MARKERS = ("metrics.jsonl", "summary.json")
"""Files whose presence marks a directory as a hierfl run directory (a user has no such files)."""

RUN_FILES = (*CONTRACT_FILES, "final_model.npy", "summary.json.tmp")
"""Everything a run writes: what ``force`` may replace."""



class RunDirError(ValueError):
    """``--out`` cannot be used: ``message`` says why (the CLI reports it under ``--out``, exit 2)."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


def _error(path: Path, message: str) -> RunDirError:
    return RunDirError(path, message)


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a directory holding (part of) an earlier run."""
    return path.is_dir() and any((path / name).exists() for name in RUN_MARKERS)


def _writable_ancestor(path: Path) -> Path:
    """The nearest existing ancestor of a directory still to be created (it must be a writable directory)."""
    probe = path.absolute()
    while not probe.exists():
        if probe.is_symlink():  # a dangling link: mkdir would fail
            break
        probe = probe.parent
    return probe


def check_out_dir(path: str | Path, *, force: bool = False, resume: bool = False) -> None:
    """Raise :class:`RunDirError` if a run may not write to ``path``; creates nothing."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise _error(path, "names an existing file, not a directory; choose a directory for the run's files")
        if not os.access(path, os.W_OK | os.X_OK):
            raise _error(path, "directory is not writable")
        if resume:
            return
        entries = sorted(p.name for p in path.iterdir())
        if not entries:
            return
        if is_run_dir(path):
            if not force:
                raise _error(path, "holds an earlier run; pass --force to replace it, or choose another --out")
            return
        shown = ", ".join(entries[:5]) + (f", … ({len(entries)} entries)" if len(entries) > 5 else "")
        raise _error(path, f"is a non-empty directory that is not a run directory ({shown}); a run never "
                           "writes among other files: choose a new or empty directory")
    if resume:
        raise _error(path, "no such run directory to resume")
    parent = _writable_ancestor(path)
    if not parent.is_dir():
        raise _error(path, f"cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _error(path, f"cannot be created: {parent} is not writable")


def prepare_dir(path: str | Path, *, force: bool = False, resume: bool = False) -> list[str]:
    """Check ``path`` (:func:`check_out_dir`), create it and, with ``force``, remove the earlier run's files.

    Returns the names of other files left in the directory (to tell the user they are from
    before). ``resume`` keeps everything. Raises :class:`RunDirError` on any problem.
    """
    path = Path(path)
    check_out_dir(path, force=force, resume=resume)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if resume:
            return []
        for name in RUN_FILES:
            (path / name).unlink(missing_ok=True)
        return sorted(p.name for p in path.iterdir())
    except OSError as exc:
        raise _error(path, f"cannot be prepared: {exc.strerror or exc}") from None
