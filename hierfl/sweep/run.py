"""``hierfl sweep``: every trial of a sweep file as one Ray Tune trial, each an ordinary hierfl run.

Ray Tune (``pip install 'hierfl[tune]'``) does the scheduling over the local machine or a cluster,
the retries (``FailureConfig(max_failures=retries)``) and the restore of an interrupted experiment
(``Tuner.restore``). Inside a trial, :func:`run_trial` loads the base scenario with the trial's
``--set`` overrides and seed and calls :func:`hierfl.driver.run_scenario` with the local executor,
writing the normal run directory ``SWEEP_DIR/runs/<trial id>/``. Since a run is a pure function of
(scenario, seed) and the executor does not change results, a trial's files are identical to
``hierfl run BASE --set ... --seed S`` (tests/interface/test_sweep.py checks it bit for bit).

Layout of a sweep directory::

    SWEEP_DIR/sweep.json     the manifest: the sweep file, base scenario, working directory, trials
    SWEEP_DIR/runs/<id>/     one ordinary run directory per trial
    SWEEP_DIR/sweep.csv      one row per trial: changed keys, seed, status and every summary field
                             (status ``refused`` and the reason as ``error`` for a trial refused by
                             declaration under ``refused: skip``; it has no run directory)
    SWEEP_DIR/tune/          Ray Tune's experiment state (what --resume restores)
"""

from __future__ import annotations

import csv
import json
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from hierfl.config.errors import ConfigError, Problem
from hierfl.sweep.spec import SweepSpec, Trial, bases, expand_all, load_sweep

__all__ = ["MANIFEST", "SweepResult", "run_sweep", "run_trial", "write_sweep_csv", "sweep_rows", "read_manifest"]

MANIFEST = "sweep.json"
CSV_FILE = "sweep.csv"
TUNE_DIR = "tune"
LOCAL = "runtime.executor=local"  # a trial runs its devices in its own process (Tune places the trial)


class SweepResult(dict):  # type: ignore[type-arg]
    """``{"dir": Path, "rows": [...], "counts": {...}, "refused": {grid point: reason}}`` of a finished
    :func:`run_sweep`."""


def _tune() -> Any:
    """``ray.tune``, or a clear error naming the extra to install."""
    # Tune's own console tables would scroll over the progress view (verbose=0 keeps the legacy engine quiet)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    try:
        from ray import tune
    except ImportError as exc:
        raise ConfigError([Problem("", f"hierfl sweep needs Ray Tune: pip install 'hierfl[tune]' ({exc})")],
                          "hierfl sweep") from None
    return tune


def _check_address(address: str | None) -> None:
    """``ray://`` (Ray Client) is rejected: trials write run directories on the cluster, not here."""
    if address and address.startswith("ray://"):
        raise ConfigError([Problem("--address", "ray:// (Ray Client) is not supported for sweeps: the trials write "
                                   "their run directories on the cluster. Submit the sweep as a Ray job instead: "
                                   "ray job submit --address http://HEAD:8265 --working-dir . -- hierfl sweep FILE "
                                   "(see docs/howto/ray-cluster.md), or give the GCS address "
                                   "HEAD:6379 from a cluster node", address)], "command line")


# -- one trial (runs in a Tune worker) -----------------------------------------------------------------

def _same_config(run_dir: Path, expected: dict[str, Any]) -> bool:
    """Whether ``run_dir/config.yaml`` holds ``expected`` (package versions aside)."""
    try:
        got = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(got, dict):
        return False
    got.pop("versions", None)
    return bool(got == expected)


def finished_summary(run_dir: Path, expected: dict[str, Any]) -> dict[str, Any] | None:
    """The summary of a completed run of exactly this trial in ``run_dir``, else None (run it)."""
    path = run_dir / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(summary, dict) and summary.get("status") == "completed" and _same_config(run_dir, expected):
        return summary
    return None


def run_trial(trial: dict[str, Any], base: str, sweep_dir: str, cwd: str | None = None,
              plugins: list[str] | None = None) -> dict[str, Any]:
    """Run one trial into ``sweep_dir/runs/<id>`` and return its summary.

    A run directory that already holds a completed run of the same resolved scenario is not run
    again (``--resume`` and Tune's retries never redo finished work); its summary is returned.
    """
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    if cwd and Path(cwd).is_dir():  # relative dataset roots (data/<name>) mean the directory the sweep started in
        os.chdir(cwd)
    t = Trial.from_dict(trial)
    base = t.base or base  # a `scenarios:` sweep names each trial's own base
    scenario = load_scenario(base, [*t.overrides, LOCAL], seed=t.seed, plugins=plugins)
    out = Path(sweep_dir) / "runs" / t.id
    expected = scenario.model_dump(mode="json")
    expected.pop("versions", None)
    done = finished_summary(out, expected)
    if done is not None:
        return done
    try:
        return run_scenario(scenario, out, source=base).summary
    except ConfigError as exc:  # raised when the trial builds its data; ConfigError does not survive pickling
        raise TrialError(exc.report()) from None


class TrialError(RuntimeError):
    """A trial that could not be built (e.g. a dataset directory missing on the node it ran on)."""


def _error_text(err: BaseException) -> str:
    """``Type: message`` of the exception a trial raised (Ray wraps it in a RayTaskError)."""
    cause = getattr(err, "cause", None) or err
    return " ".join(f"{type(cause).__name__}: {cause}".split())


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested summary → ``a.b`` keys; lists become JSON text."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def _trainable(config: dict[str, Any]) -> None:
    """The Tune function trainable: one hierfl run, its numeric summary fields reported once."""
    from ray import tune

    from hierfl.config.plugins import install_bundle

    # the sweep's plug-ins, from the text the driver read (this node may not have the files), before
    # the trial's scenario is validated
    install_bundle(config.get("plugin_bundle") or ())
    summary = run_trial(config["trial"], config["base"], config["sweep_dir"], config.get("cwd"),
                        config.get("plugins") or None)
    tune.report({k: v for k, v in _flat(summary).items() if isinstance(v, (int, float)) and not isinstance(v, bool)})


# -- the progress view -----------------------------------------------------------------------------------

def _progress_callback(total: int, name: str, quiet: bool) -> Any:
    """A Tune callback drawing trials done / running / failed / pending with rich (on stderr)."""
    tune = _tune()

    class Progress(tune.Callback):  # type: ignore[misc, name-defined]
        """Counts trial states on every change; Tune pickles callbacks, so the console is made lazily."""

        def __init__(self) -> None:
            self.total, self.name, self.quiet = total, name, quiet
            self._bar: Any = None
            self._task: Any = None
            self._last: tuple[int, ...] = ()
            self.failures: dict[str, int] = {}  # trial id -> failed attempts (each one retried or recorded)

        def __getstate__(self) -> dict[str, Any]:
            return {"total": self.total, "name": self.name, "quiet": self.quiet}

        def __setstate__(self, state: dict[str, Any]) -> None:
            self.__init__()  # type: ignore[misc]
            self.total, self.name, self.quiet = state["total"], state["name"], state["quiet"]

        def _draw(self, trials: list[Any]) -> None:
            if self.quiet:
                return
            status = [t.status for t in trials]
            done, failed = status.count("TERMINATED"), status.count("ERROR")
            running = status.count("RUNNING")
            pending = max(self.total - done - failed - running, 0)
            counts = (done, running, failed, pending)
            if counts == self._last:
                return
            self._last = counts
            if self._bar is None:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                     console=Console(stderr=True))
                self._bar.start()
                self._task = self._bar.add_task(self.name, total=self.total, info="")
            info = f"done {done} · running {running} · failed {failed} · pending {pending}"
            self._bar.update(self._task, completed=done + failed, info=info)

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._draw(trials)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._draw(trials)

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._failed(trial)
            self._draw(trials)

        def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._failed(trial)
            self._draw(trials)

        def _failed(self, trial: Any) -> None:
            tid = str(trial.config["trial"]["id"])
            self.failures[tid] = self.failures.get(tid, 0) + 1

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            self._draw(trials)
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    return Progress()


def _mlflow_callbacks(spec: SweepSpec) -> list[Any]:
    """Tune's own MLflow logger when the sweep names ``mlflow:`` (the ``mlflow`` extra)."""
    if spec.mlflow is None:
        return []
    try:
        import mlflow  # noqa: F401
        from ray.air.integrations.mlflow import MLflowLoggerCallback
    except ImportError:
        raise ConfigError([Problem("mlflow", "logging to MLflow needs the mlflow package: "
                                             "pip install 'hierfl[mlflow]'")], "sweep file") from None
    try:
        return [MLflowLoggerCallback(**spec.mlflow)]
    except TypeError as exc:
        raise ConfigError([Problem("mlflow", f"not an argument of Tune's MLflowLoggerCallback: {exc}")],
                          "sweep file") from None


# -- the sweep directory -------------------------------------------------------------------------------

def read_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    """``SWEEP_DIR/sweep.json`` (a :class:`ConfigError` naming the directory if it is not a sweep)."""
    path = Path(sweep_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([Problem("", f"not a sweep directory (no {MANIFEST})")], str(sweep_dir)) from None
    except (OSError, ValueError) as exc:
        raise ConfigError([Problem("", f"{path}: cannot read the manifest: {exc}")], str(sweep_dir)) from None
    return manifest  # type: ignore[no-any-return]


def _cell(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def sweep_rows(sweep_dir: str | Path, errors: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per trial: id, status, seed, each changed key (a section also as ``key.name``), the run
    directory, the error of a failed trial, then every summary field (nested ones as ``a.b``)."""
    sweep_dir = Path(sweep_dir)
    manifest = read_manifest(sweep_dir)
    errors = dict(errors or {})
    rows = []
    for d in manifest["trials"]:
        t = Trial.from_dict(d)
        run_dir = sweep_dir / "runs" / t.id
        try:
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = {}
        status = summary.get("status")
        if t.refused is not None:  # never run: the protocol refuses this combination by declaration
            status = "refused"
            errors[t.id] = t.refused
        elif status not in ("completed", "failed", "interrupted"):
            status = "failed" if t.id in errors else "not run"
        elif status != "completed" and t.id not in errors and "error" in summary:
            errors[t.id] = summary["error"]
        row: dict[str, Any] = {"trial": t.id, "status": status, "seed": t.seed}
        for key, value in t.changed.items():
            row[key] = _cell(value)
            if isinstance(value, dict) and "name" in value:
                row[f"{key}.name"] = value["name"]
        row["run_dir"] = str(Path("runs") / t.id)
        row["error"] = errors.get(t.id, "") if status != "completed" else ""
        row.update({k: v for k, v in _flat(summary).items() if k not in ("status", "seed")})
        rows.append(row)
    return rows


def write_sweep_csv(sweep_dir: str | Path, rows: list[dict[str, Any]]) -> Path:
    """``sweep.csv``: the rows with the union of their columns, in first-seen order."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    path = Path(sweep_dir) / CSV_FILE
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns))
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    return path


def _init_ray(address: str | None) -> None:
    import ray

    if ray.is_initialized():
        return
    # no address: RAY_ADDRESS when set (a `ray job submit` entrypoint has it), else a new private local
    # instance: a bare ray.init() would attach to whatever cluster this machine last started (another
    # sweep's, say), and hang when that one shuts down
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    # a token-protected cluster by its address: token mode where the user meant it, and a refused
    # token reported at once (ClusterAuthError) instead of after Ray's 20 s of retries
    from hierfl.runtime.ray_auth import local_token_notice, prepare

    prepare(address)
    if address == "local":  # a new local instance: Ray's token warning in hierfl's words
        local_token_notice()
    ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)


def run_sweep(sweep_file: str | Path | None = None, out: str | Path | None = None, *, resume: str | Path | None = None,
              address: str | None = None, quiet: bool = False, plugins: list[str] | None = None) -> SweepResult:
    """Run a sweep file (or ``resume`` an interrupted sweep directory) on Ray Tune; returns the rows.

    ``plugins`` (files relative to the working directory, or module names) are loaded here before
    the trials are validated, and in every trial; the manifest records them (a resumed sweep loads them again).
    Raises :class:`ConfigError` (nothing written) for a bad sweep file or trial scenario.
    """
    from hierfl.config.plugins import bundle, load_plugins

    tune = _tune()
    _check_address(address)
    refs = load_plugins(plugins, key="plugins", source="sweep plug-ins")
    plugin_specs = [r.spec for r in refs]  # resolved: absolute paths, module names
    if resume is not None:
        sweep_dir = Path(resume)
        manifest = read_manifest(sweep_dir)
        recorded = list(manifest.get("plugins") or [])  # the plug-ins the sweep began with
        load_plugins(recorded, key="plugins", source=str(sweep_dir / MANIFEST))
        plugin_specs += [p for p in recorded if p not in plugin_specs]
        spec = SweepSpec.model_validate(manifest["spec"])
    else:
        if sweep_file is None:
            raise ConfigError([Problem("", "give a sweep file or --resume DIR")], "hierfl sweep")
        spec = load_sweep(sweep_file)
        try:
            base_map = bases(spec, Path(sweep_file).parent)
        except ConfigError as exc:
            raise ConfigError(exc.problems, str(sweep_file)) from None
        base = base_map.get(None, (None, []))[0]  # None for a `scenarios:` sweep: every trial names its own
        runnable, _, refused = expand_all(spec, base, str(sweep_file), sweep_dir=Path(sweep_file).parent,
                                          plugins=plugin_specs)
        # the manifest keeps the grid's order (trial ids are numbered over every trial, refused ones too)
        trials = sorted([*runnable, *refused], key=lambda t: t.id)
        sweep_dir = Path(out) if out is not None else Path("sweeps") / spec.name
        if (sweep_dir / MANIFEST).exists():
            raise ConfigError([Problem("", f"{sweep_dir} already holds a sweep; use --resume {sweep_dir} to finish "
                                           "it, or another --out")], str(sweep_file))
        manifest = {"name": spec.name, "sweep_file": str(Path(sweep_file).resolve()),
                    "base": str(base.resolve()) if base else None, "cwd": os.getcwd(), "spec": spec.model_dump(mode="json"),
                    "plugins": plugin_specs, "trials": [t.as_dict() for t in trials]}
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    sweep_dir = sweep_dir.resolve()
    trials_d = [t for t in manifest["trials"] if t.get("refused") is None]  # refused trials are not run
    _init_ray(address)
    from hierfl.runtime.ray_cluster import IdleHosts

    IdleHosts.clear()  # host actors an earlier run of this process kept would hold CPUs the trials need
    res = spec.resources_per_run
    resources: dict[str, float] = {"cpu": res.cpu, "gpu": res.gpu}
    if res.memory_mb:
        resources["memory"] = res.memory_mb * 1024 * 1024
    trainable = tune.with_resources(_trainable, resources)
    tune_path = sweep_dir / TUNE_DIR
    callbacks = [_progress_callback(len(trials_d), spec.name, quiet), *_mlflow_callbacks(spec)]
    if resume is not None and tune.Tuner.can_restore(str(tune_path)):
        # Tune's restore: finished and failed trials stay as they are; pending and interrupted ones run
        tuner = tune.Tuner.restore(str(tune_path), trainable=trainable, resume_unfinished=True,
                                   resume_errored=False, restart_errored=False)
    else:
        param_space = {"trial": tune.grid_search(trials_d), "base": manifest["base"], "sweep_dir": str(sweep_dir),
                       "cwd": manifest["cwd"], "plugins": plugin_specs, "plugin_bundle": list(bundle())}
        tuner = tune.Tuner(
            trainable, param_space=param_space,
            # a trial's actor serves the next trial (a trial process imports hierfl and torch: seconds, often more than
            # a short run); a run builds everything it uses anew, and plug-ins load once per process, so a trial
            # computes the same bits in a reused actor (tests/interface/test_sweep.py compares one-by-one runs)
            tune_config=tune.TuneConfig(max_concurrent_trials=spec.max_concurrent, reuse_actors=True,
                                        trial_dirname_creator=_trial_dirname, trial_name_creator=_trial_dirname),
            run_config=tune.RunConfig(name=TUNE_DIR, storage_path=str(sweep_dir), verbose=0, callbacks=callbacks,
                                      failure_config=tune.FailureConfig(max_failures=spec.retries),
                                      checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))
    grid = tuner.fit()
    errors: dict[str, str] = {}
    for result in grid:
        if result.error is not None and result.config:
            errors[result.config["trial"]["id"]] = _error_text(result.error)
    rows = sweep_rows(sweep_dir, errors)
    for row in rows:  # attempts made in this invocation (a resumed sweep counts its own)
        failures = callbacks[0].failures.get(row["trial"], 0)
        row["attempts"] = failures + (1 if row["status"] == "completed" else 0)
    write_sweep_csv(sweep_dir, rows)
    statuses = [r["status"] for r in rows]
    counts = {s: statuses.count(s) for s in ("completed", "failed", "not run")}
    if "refused" in statuses:  # only a `refused: skip` sweep has the count
        counts["refused"] = statuses.count("refused")
    refused_points: dict[str, str] = {}  # grid point -> reason (its seeds share it)
    for d in manifest["trials"]:
        if d.get("refused") is not None:
            point = ", ".join(f"{k}={_point_label(v)}" for k, v in d.get("changed", {}).items()) or "every trial"
            refused_points.setdefault(point, d["refused"])
    return SweepResult(dir=sweep_dir, rows=rows, counts=counts, refused=refused_points)


def _point_label(value: Any) -> str:
    """A grid value as the refusal lines name it: a plug-in section by its name."""
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return str(value["name"])
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _trial_dirname(trial: Any) -> str:
    """Tune's per-trial folder: the hierfl trial id (Tune's default is a long config repr)."""
    return str(trial.config["trial"]["id"])
