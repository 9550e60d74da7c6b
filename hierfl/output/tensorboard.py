"""``output.tensorboard: true``: evaluation lines as TensorBoard scalars, through the maintained writer.

The events are written by ``torch.utils.tensorboard.SummaryWriter``, which is the ``tensorboard``
package's own event-file writer (the ``tensorboard`` extra: ``pip install 'hierfl[tensorboard]'``);
no event-file format is written by hand here.

Every ``eval`` line gives, for ``accuracy``, ``loss``, each ``staleness_mean_<tier>`` and each
``queue_len_<tier>`` (asynchronous protocols):

* ``by_round/<key>`` with step = cloud rounds so far, and
* ``by_time/<key>`` with step = virtual time in milliseconds (TensorBoard steps are integers),

both stamped with the virtual time in seconds as the event's wall time, so TensorBoard's
*relative* x axis also reads virtual time. Files go to ``<run dir>/tensorboard/``:
``tensorboard --logdir runs`` shows every run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

__all__ = ["TB_DIR", "TensorBoardWriter", "scalar_keys"]

TB_DIR = "tensorboard"
_PREFIXES = ("staleness_mean_", "queue_len_")


def scalar_keys(line: dict[str, Any]) -> list[str]:
    """The keys of an eval line that become scalars (numeric values only: timing-only runs have none)."""
    keys = [k for k in line if k in ("accuracy", "loss") or k.startswith(_PREFIXES)]
    return [k for k in keys if isinstance(line[k], (int, float)) and not isinstance(line[k], bool)]


class TensorBoardWriter:
    """Scalars of ``eval`` lines into ``out_dir/tensorboard`` (replaced when the run directory is reused)."""

    def __init__(self, out_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package (the extra)

        path = Path(out_dir) / TB_DIR
        shutil.rmtree(path, ignore_errors=True)  # a re-run's curves must not mix with the previous run's
        self._writer = SummaryWriter(log_dir=str(path))

    def write(self, line: dict[str, Any]) -> None:
        """Add the scalars of one metric line (lines other than ``eval`` are ignored)."""
        if line.get("event") != "eval":
            return
        t = float(line["t"])
        step_ms = int(round(t * 1000))
        for key in scalar_keys(line):
            value = float(line[key])
            self._writer.add_scalar(f"by_round/{key}", value, global_step=int(line["round"]), walltime=t)
            self._writer.add_scalar(f"by_time/{key}", value, global_step=step_ms, walltime=t)

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
