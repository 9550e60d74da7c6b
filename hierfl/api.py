"""The Python API: ``hierfl.run``, ``hierfl.load_run`` and ``hierfl.sweep``, with pandas data frames.

>>> import hierfl
>>> r = hierfl.run("scenarios/quickstart.yaml", overrides={"stop.rounds": 3}, seed=1, executor="local")
>>> r.summary["final_accuracy"], r.evals[["t", "accuracy"]].tail(1)

A run made here is the same run as ``hierfl run`` (same loader, same driver, same files); without
``out`` it is written to a temporary directory that is read back into frames and removed.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from hierfl.config.errors import ConfigError, Problem

if TYPE_CHECKING:
    import pandas as pd

    from hierfl.scenario.loader import Overrides
    from hierfl.scenario.schema import Scenario

__all__ = ["RunResultFrames", "run", "load_run", "sweep", "load_sweep"]


@dataclass
class RunResultFrames:
    """A run as data: its summary and its output files as pandas frames.

    ``evals``: the ``eval`` lines of ``metrics.jsonl`` (``t``, ``round``, ``accuracy``, ``loss``, the
    counters, staleness and queue keys); ``events``: every metric line (``event`` says which kind);
    ``devices``: ``devices.csv``; ``clusters``: one row per device and ``clusters.jsonl`` record
    (``t``, ``reason``, ``grouping``, ``cluster``, ``leader``, ``device``), None for a flat run
    (devices talking to the cloud directly, never re-clustered).
    """

    dir: Path | None
    summary: dict[str, Any]
    config: dict[str, Any]
    evals: pd.DataFrame
    events: pd.DataFrame
    devices: pd.DataFrame
    clusters: pd.DataFrame | None

    def __repr__(self) -> str:
        s = self.summary
        return (f"RunResultFrames({s.get('name')!r}, status={s.get('status')!r}, rounds={s.get('rounds')}, "
                f"final_accuracy={s.get('final_accuracy')}, evals={len(self.evals)} rows, dir={self.dir})")


def _clusters_frame(run_dir: Path) -> pd.DataFrame | None:
    import pandas as pd

    path = run_dir / "clusters.jsonl"
    if not path.is_file():
        return None
    rows = []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if all(r.get("grouping") == "flat" for r in records):
        return None
    for rec in records:
        leaders = rec.get("leaders") or []
        for c, members in enumerate(rec.get("members", [])):
            leader = leaders[c] if c < len(leaders) else None
            rows += [{"t": rec["t"], "reason": rec["reason"], "grouping": rec["grouping"], "cluster": c,
                      "leader": leader, "device": int(d)} for d in members]
    return pd.DataFrame(rows, columns=["t", "reason", "grouping", "cluster", "leader", "device"])


def load_run(run_dir: str | Path) -> RunResultFrames:
    """A run directory (``hierfl run --out DIR``, or a sweep's ``runs/<id>``) as frames.

    Raises :class:`~hierfl.viz.runs.RunReadError` (a ``ValueError``) if it is not a run directory.
    """
    import pandas as pd

    from hierfl.viz.runs import RunReadError, read_metrics, read_summary

    run_dir = Path(run_dir)
    lines = read_metrics(run_dir)
    events = pd.DataFrame(lines)
    evals = pd.DataFrame([r for r in lines if r.get("event") == "eval"])
    devices_path = run_dir / "devices.csv"
    devices = pd.read_csv(devices_path) if devices_path.is_file() else pd.DataFrame()
    config_path = run_dir / "config.yaml"
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    except yaml.YAMLError as exc:
        raise RunReadError(f"{config_path}: invalid YAML: {exc}") from None
    return RunResultFrames(run_dir, read_summary(run_dir), config or {}, evals, events, devices,
                           _clusters_frame(run_dir))


def _scenario(scenario: str | Path | dict[str, Any] | Scenario, overrides: Overrides | None,
              seed: int | None, plugins: Sequence[str | Path] | str | Path | None = None
              ) -> tuple[Scenario, str | None]:
    """Load a path, a raw mapping or a :class:`Scenario`, then apply ``overrides`` and ``seed``
    (``plugins`` are loaded first: the scenario may name what they register)."""
    from hierfl.config.plugins import load_plugins
    from hierfl.scenario.loader import apply_overrides, load_scenario, validate_raw
    from hierfl.scenario.schema import Scenario

    specs = _plugin_list(plugins)
    load_plugins(specs, key="plugins", source="plugins=")  # its own errors: keyed plugins[i] of the argument
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario, overrides, seed=seed, plugins=specs), str(scenario)
    if isinstance(scenario, Scenario):
        raw = scenario.model_dump(mode="json")
    elif isinstance(scenario, dict):
        raw = dict(scenario)
    else:
        raise ConfigError([Problem("", "expected a scenario file path, a mapping or a Scenario",
                                   type(scenario).__name__)], "hierfl.run")
    raw = apply_overrides(raw, overrides)
    if seed is not None:
        raw["seed"] = seed
    raw.setdefault("name", "run")
    return validate_raw(raw, plugins=specs), None


def _plugin_list(plugins: Any) -> list[str] | None:
    """``plugins=`` as a list (one path or module name may be given alone)."""
    if plugins is None:
        return None
    if isinstance(plugins, (str, Path)):
        return [str(plugins)]
    return [str(p) if isinstance(p, Path) else p for p in plugins]


def _with_executor(overrides: Overrides | None, executor: str | None) -> Overrides | None:
    """``overrides`` with ``runtime.executor`` set to ``executor`` (unchanged when it is None)."""
    from collections.abc import Mapping, Sequence

    if executor is None:
        return overrides
    if overrides is None:
        return {"runtime.executor": executor}
    if isinstance(overrides, Mapping):
        return {**overrides, "runtime.executor": executor}
    if isinstance(overrides, str):
        return [overrides, f"runtime.executor={executor}"]
    if isinstance(overrides, Sequence):
        return [*overrides, f"runtime.executor={executor}"]
    return overrides  # not an override at all: the loader says what is accepted


def run(scenario: str | Path | dict[str, Any] | Scenario, overrides: Overrides | None = (),
        seed: int | None = None, out: str | Path | None = None, *, executor: str | None = None,
        plugins: Sequence[str | Path] | str | Path | None = None) -> RunResultFrames:
    """Run a scenario and return its summary and frames.

    The run uses the scenario's ``runtime.executor``: **Ray** unless the scenario says otherwise
    (the default, with as many workers as there are CPUs; it starts a local Ray instance, a few
    seconds). ``executor="local"`` runs in this process, with the same results, and is the quicker
    choice for small scenarios in a notebook or a script.

    >>> r = hierfl.run("scenarios/quickstart.yaml", {"stop.virtual_time_s": 30}, executor="local")

    Parameters
    ----------
    scenario : path, mapping or Scenario
        A scenario YAML (``extends`` resolved relative to it), a raw mapping as YAML would give,
        or a validated :class:`~hierfl.scenario.schema.Scenario`.
    overrides : mapping or sequence of str
        A mapping ``{"key.path": value}`` of Python values (``{"stop.virtual_time_s": 10,
        "straggler": {"name": "deadline", "seconds": 4.0}}``), taken as they are; or
        ``KEY.PATH=VALUE`` strings, exactly as ``--set`` takes them (values parsed as YAML).
        Anything else (an int, a set) is a ConfigError saying what is accepted.
    seed : int, optional
        Replaces the scenario's seed.
    out : path, optional
        The run directory to write (kept); by default a temporary one, removed after reading it
        (the result's ``dir`` is then None).
    executor : str, optional
        A registered executor (``local``, ``ray``) in place of the scenario's ``runtime.executor``;
        by default the scenario's (``ray`` when it names none).
    plugins : sequence of str, optional
        Plug-ins (``.py`` file paths, relative to the working directory, or module names) loaded before
        the scenario is validated, as ``--plugin`` does; in Ray workers too. Recorded in the run's
        ``config.yaml`` (``plugins:``).

    Raises
    ------
    ConfigError
        The scenario is invalid (every problem with its key path); nothing is run.
    RunError
        The run failed part-way (``out``, when given, has the metrics so far).
    """
    from hierfl.driver import run_scenario

    sc, source = _scenario(scenario, _with_executor(overrides, executor), seed, plugins)
    if out is not None:
        run_scenario(sc, Path(out), source=source)
        return load_run(out)
    with tempfile.TemporaryDirectory(prefix="hierfl-run-") as tmp:
        run_scenario(sc, Path(tmp), source=source)
        result = load_run(tmp)
    result.dir = None
    return result


def load_sweep(sweep_dir: str | Path) -> pd.DataFrame:
    """``SWEEP_DIR/sweep.csv`` as a frame (one row per trial), re-read from the run directories."""
    import pandas as pd

    from hierfl.sweep.run import sweep_rows

    return pd.DataFrame(sweep_rows(sweep_dir))


def sweep(sweep_file: str | Path | None = None, out: str | Path | None = None, *,
          resume: str | Path | None = None, address: str | None = None, quiet: bool = True,
          plugins: Sequence[str | Path] | str | Path | None = None) -> pd.DataFrame:
    """Run a sweep file on Ray Tune (see :func:`hierfl.sweep.run.run_sweep`) and return ``sweep.csv``
    as a frame; ``resume`` finishes an interrupted sweep directory instead. Needs ``hierfl[tune]``.
    ``plugins`` are loaded here and in every trial before its scenario is validated."""
    import pandas as pd

    from hierfl.sweep.run import run_sweep

    result = run_sweep(sweep_file, out, resume=resume, address=address, quiet=quiet,
                       plugins=_plugin_list(plugins))
    frame = pd.DataFrame(result["rows"])
    frame.attrs["dir"] = str(result["dir"])
    return frame
