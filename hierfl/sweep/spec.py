"""The sweep file: a base scenario, a grid over ``--set`` key paths, seeds, resources and retries.

A sweep file is YAML, validated by pydantic like a scenario (unknown keys are errors, every problem
names its key path)::

    name: stragglers_seeds
    scenario: ../stragglers.yaml          # the base scenario, relative to this file
    set: [devices.count=20]               # fixed overrides of every trial (``--set`` syntax)
    grid:                                 # key path -> values; trials are the cross product
      straggler:                          # a whole plug-in section, or any leaf (protocol.fraction)
        - {name: wait_all}
        - {name: deadline, seconds: 4.0}
    seeds: [1, 2, 3]                      # or a count: 3 means seeds 0, 1, 2
    resources_per_run: {cpu: 1}
    retries: 1                            # a failed trial is run again this many times, then recorded
    refused: error                        # or skip: record a trial the protocol refuses by declaration
    metric: accuracy                      # the eval-line metric plots and tables default to
    target: 0.84                          # evaluation.target_accuracy of every trial (time to target)

Several base scenarios (methods that each ship their own scenario file) are one more grid axis:
``scenarios:`` instead of ``scenario:``, a mapping label -> base file, or label -> ``{scenario: FILE,
set: [...]}`` for overrides that belong to that base only. The label is the trial's changed key
``scenario`` (a ``sweep.csv`` column; ``hierfl plot/table --group-by scenario``)::

    scenarios:
      mine: ../../scenarios/mine.yaml
      baseline: {scenario: ../../scenarios/other.yaml, set: ["protocol={name: baseline, fraction: 1.0}"]}

Expanding it (:func:`expand`) loads and validates every trial's scenario up front, so a bad grid
value is a configuration error (exit 2) before anything runs or is written.

A grid that crosses protocols with straggler policies meets combinations a protocol refuses by
declaration (a policy at an aggregation point that takes none, e.g. ``deadline`` in a protocol
whose aggregations are periodic queues). With ``refused: skip`` such a trial is not an error: it is kept in
the manifest with its reason (``Trial.refused``), not run, and shown as ``refused: <reason>`` by
``hierfl sweep``, ``hierfl validate`` and ``hierfl table``. Any other problem of a trial is still an
error, and so is a sweep whose every trial is refused.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, ValidationError, field_validator, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.errors import ConfigError, Problem
from hierfl.scenario.loader import load_scenario
from hierfl.scenario.schema import Scenario

__all__ = ["Base", "Resources", "SweepSpec", "Trial", "load_sweep", "expand", "expand_all", "refusal_text",
           "trial_overrides", "bases", "check_trials", "looks_like_sweep", "SCENARIO_KEY"]

SCENARIO_KEY = "scenario"  # the changed key naming a trial's base scenario (``scenarios:`` sweeps)

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


class Resources(ConfigModel):
    """What one trial reserves on the Ray cluster (Tune's ``resources_per_trial``)."""

    cpu: PositiveFloat = 1.0
    gpu: float = Field(default=0.0, ge=0.0)
    memory_mb: PositiveInt | None = Field(default=None, description="Ray memory reservation per trial")


class Base(ConfigModel):
    """One base scenario of a ``scenarios:`` sweep, with overrides of its own."""

    scenario: str = Field(description="the base scenario YAML (relative to the sweep file)")
    set: list[str] = Field(default_factory=list, description="overrides of this base only, KEY.PATH=VALUE "
                                                             "(applied after the sweep's own `set`)")


class SweepSpec(ConfigModel):
    """A validated sweep file."""

    name: str = Field(default="sweep", description="names the default output directory sweeps/<name>")
    scenario: str | None = Field(default=None, description="the base scenario YAML (relative to the sweep file)")
    scenarios: dict[str, str | Base] | None = Field(
        default=None, description="several base scenarios, label -> file or {scenario, set}: one more grid axis "
                                  "(the changed key `scenario`); instead of `scenario`")
    set: list[str] = Field(default_factory=list, description="overrides applied to every trial, KEY.PATH=VALUE")
    grid: dict[str, list[Any]] = Field(default_factory=dict,
                                       description="key path -> values (any --set path, whole sections too)")
    seeds: list[NonNegativeInt] | PositiveInt = Field(default=1, description="seed list, or a count N = 0..N-1")
    resources_per_run: Resources = Resources()
    retries: NonNegativeInt = Field(default=1, description="re-runs of a failed trial before it is recorded failed")
    max_concurrent: PositiveInt | None = Field(default=None, description="trials at once (default: as resources allow)")
    metric: str = Field(default="accuracy", description="eval-line metric of plots and tables")
    mode: Literal["max", "min"] = "max"
    target: float | None = Field(default=None, gt=0.0, le=1.0,
                                 description="sets evaluation.target_accuracy of every trial")
    refused: Literal["error", "skip"] = Field(
        default="error",
        description="a trial whose scenario the protocol refuses by declaration (a straggler policy at an aggregation "
                    "point that takes none): error stops the sweep before it runs; skip records the trial as "
                    "`refused: <reason>` and runs the others [D]")
    mlflow: dict[str, Any] | None = Field(
        default=None, description="log every trial to MLflow through Tune's MLflowLoggerCallback; keys are its "
                                  "arguments (tracking_uri, experiment_name, ...); needs the mlflow extra")

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if not key or any(not part for part in key.split(".")):
                raise ValueError(f"{key!r} is not a key path (e.g. protocol.fraction)")
            if key == "seed":
                raise ValueError("use `seeds:` for seeds, not a grid over `seed`")
            if key == SCENARIO_KEY:
                raise ValueError("use `scenarios: {label: file, ...}` for several base scenarios, not a grid over "
                                 "`scenario`")
            if not values:
                raise ValueError(f"{key}: give at least one value")
        return value

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, value: dict[str, str | Base] | None) -> dict[str, str | Base] | None:
        if value is not None and not value:
            raise ValueError("give at least one label: base scenario file")
        for label in value or {}:
            if not str(label).strip():
                raise ValueError("a base scenario label must not be empty")
        return value

    @model_validator(mode="after")
    def _one_base(self) -> SweepSpec:
        if (self.scenario is None) == (self.scenarios is None):
            raise ValueError("give exactly one of `scenario` (one base scenario file) or `scenarios` "
                             "(label -> base scenario file)")
        return self

    @property
    def seed_list(self) -> list[int]:
        """The seeds, a count expanded to ``0..N-1``."""
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


@dataclass(frozen=True)
class Trial:
    """One (grid point, seed): an ordinary run of the base scenario with these overrides."""

    id: str
    overrides: list[str]              # --set strings, exactly as `hierfl run --set` takes them
    seed: int
    changed: dict[str, Any] = field(default_factory=dict)  # grid key path -> its value in this trial
    base: str | None = None           # this trial's base scenario (``scenarios:`` sweeps); None: the sweep's one
    refused: str | None = None        # why the protocol refuses this trial by declaration (``refused: skip``); not run

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (Tune's config, the sweep manifest)."""
        d = {"id": self.id, "overrides": list(self.overrides), "seed": self.seed, "changed": dict(self.changed)}
        if self.base is not None:
            d["base"] = self.base
        if self.refused is not None:
            d["refused"] = self.refused
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        """Inverse of :meth:`as_dict`."""
        return cls(d["id"], list(d["overrides"]), int(d["seed"]), dict(d.get("changed", {})), d.get("base"),
                   d.get("refused"))


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate a sweep file (a :class:`ConfigError` with every problem otherwise)."""
    path = Path(path)
    src = str(path)
    if not path.is_file():
        raise ConfigError([Problem("", "sweep file not found")], src)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError([Problem("", f"invalid YAML: {exc}")], src) from None
    if not isinstance(raw, dict):
        raise ConfigError([Problem("", "a sweep file must be a mapping (scenario, grid, seeds, ...)")], src)
    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            parts = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "constrained-"))]
            if parts[:1] == ["scenarios"] and len(parts) > 2 and parts[2] in ("str", "Base"):
                del parts[2]  # pydantic's union branch tag (a file, or {scenario, set})
            loc = ".".join(parts)
            msg = err["msg"].removeprefix("Value error, ")
            whole = not loc  # the model-level check (one of scenario / scenarios): its input is the whole file
            if whole:
                loc = "scenario"
            if err["type"] == "extra_forbidden":
                msg = ("unknown key; allowed: " + ", ".join(SweepSpec.model_fields)) if "." not in loc \
                    else "unknown key"
            elif err["type"] == "missing":
                msg = "required key is missing"
            problems.append(Problem(loc, msg) if err["type"] == "missing" or whole
                            else Problem(loc, msg, err.get("input")))
        raise ConfigError(problems, src) from None


def _label(value: Any) -> str:
    """Short text for a grid value in a trial id: a plug-in section by its name."""
    if isinstance(value, dict):
        for key in ("name", "dist"):
            if isinstance(value.get(key), str):
                return str(value[key])
        return "-".join(f"{k}{_label(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "-".join(_label(v) for v in value)
    return str(value)


def bases(spec: SweepSpec, sweep_dir: Path) -> dict[str | None, tuple[Path, list[str]]]:
    """Label -> (base scenario path, its own overrides); ``{None: (path, [])}`` for a one-base sweep.

    Paths are relative to ``sweep_dir`` (the sweep file's folder). A missing file is a
    :class:`ConfigError` naming ``scenario`` or ``scenarios.<label>``.
    """
    if spec.scenarios is None:
        items: dict[str | None, tuple[str, list[str]]] = {None: (str(spec.scenario), [])}
    else:
        items = {label: (b, []) if isinstance(b, str) else (b.scenario, list(b.set))
                 for label, b in spec.scenarios.items()}
    out: dict[str | None, tuple[Path, list[str]]] = {}
    problems = []
    for label, (rel, sets) in items.items():
        path = sweep_dir / rel
        if not path.is_file():
            problems.append(Problem("scenario" if label is None else f"scenarios.{label}",
                                    "base scenario file not found", str(path)))
        out[label] = (path, sets)
    if problems:
        raise ConfigError(problems, "sweep file")
    return out


def trial_overrides(spec: SweepSpec, changed: dict[str, Any]) -> list[str]:
    """The ``--set`` strings of one grid point: the sweep's fixed ones, the target, then the grid values.

    Values are written as JSON (which is YAML), so a whole section like
    ``straggler={"name": "deadline", "seconds": 4.0}`` takes the same path as on the command line.
    """
    out = list(spec.set)
    if spec.target is not None:
        out.append(f"evaluation.target_accuracy={spec.target!r}")
    out += [f"{key}={json.dumps(value)}" for key, value in changed.items() if key != SCENARIO_KEY]
    return out


def _points(spec: SweepSpec, base: Path | None, source: str | None,
            sweep_dir: Path | None) -> list[tuple[Trial, Path, str]]:
    """Every trial of ``spec`` (base scenarios × grid in file order × seeds), with its base scenario file and
    its grid point as text (``scenario=baseline, straggler=deadline``); nothing is loaded yet."""
    if spec.scenarios is None:
        if base is None:
            base = (sweep_dir or (Path(source).parent if source else Path("."))) / str(spec.scenario)
        base_map: dict[str | None, tuple[Path, list[str]]] = {None: (base, [])}
    else:
        base_map = bases(spec, sweep_dir or (Path(source).parent if source else Path(".")))
    keys = list(spec.grid)
    points = list(itertools.product(*(spec.grid[k] for k in keys))) if keys else [()]
    out: list[tuple[Trial, Path, str]] = []
    for label, (base_path, base_sets), point in ((lb, bs, pt) for lb, bs in base_map.items() for pt in points):
        changed = ({SCENARIO_KEY: label} if label is not None else {}) | dict(zip(keys, point))
        overrides = trial_overrides(spec, changed)
        # a base's own overrides go after the sweep's fixed ones (more specific) and before the grid values
        at = len(spec.set) + (spec.target is not None)
        overrides[at:at] = base_sets
        trial_base = str(base_path.resolve()) if label is not None else None
        where = ", ".join(f"{k}={_label(v)}" for k, v in changed.items()) or "every trial"
        for seed in spec.seed_list:
            parts = [f"{k.split('.')[-1] if isinstance(v, dict) else k}={_label(v)}" for k, v in changed.items()]
            tid = _ID_UNSAFE.sub("_", "_".join([f"t{len(out):03d}", *parts, f"seed={seed}"]))
            out.append((Trial(tid, overrides, seed, changed, trial_base), base_path, where))
    return out


def _named(prefix: str, p: Problem) -> Problem:
    """``p`` with ``prefix`` before its key path."""
    path = f"{prefix}: {p.path}".rstrip(": ")
    return Problem(path, p.message, p.value, refused=p.refused)


def refusal_text(problems: Sequence[Problem]) -> str | None:
    """The reason a trial is refused by declaration (every problem a refusal), else None.

    Only what was refused and why is kept (``straggler.name: device→edge: ...``); the list of what is
    allowed instead, which follows ``; allowed``, belongs to the error a single run gives."""
    if not problems or not all(p.refused for p in problems):
        return None
    return "; ".join(f"{p.path}: {p.message.split('; allowed')[0]}" for p in problems)


def expand(spec: SweepSpec, base: Path | None = None, source: str | None = None, *,
           sweep_dir: Path | None = None) -> tuple[list[Trial], list[Scenario]]:
    """Every trial of ``spec`` (base scenarios × grid in file order × seeds) and its validated scenario.

    ``base`` is the base scenario of a one-base sweep; the files of a ``scenarios:`` sweep are taken
    relative to ``sweep_dir`` (default: the folder of ``source``). All trials are validated before
    any runs; their problems are gathered into one :class:`ConfigError` whose key paths name the
    grid point (``grid point (scenario=baseline, straggler=deadline): ...``). Trials refused by
    declaration under ``refused: skip`` are left out (:func:`expand_all` returns them too).
    """
    trials, scenarios, _ = expand_all(spec, base, source, sweep_dir=sweep_dir)
    return trials, scenarios


def expand_all(spec: SweepSpec, base: Path | None = None, source: str | None = None, *,
               sweep_dir: Path | None = None, plugins: Sequence[str] | None = None
               ) -> tuple[list[Trial], list[Scenario], list[Trial]]:
    """:func:`expand`, and the trials refused by declaration (``refused: skip``), each with its reason
    (``plugins``: loaded besides each trial scenario's own, and recorded in it)."""
    trials: list[Trial] = []
    scenarios: list[Scenario] = []
    refused: list[Trial] = []
    problems: list[Problem] = []
    for trial, base_path, where in _points(spec, base, source, sweep_dir):
        try:
            sc = load_scenario(base_path, trial.overrides, seed=trial.seed, plugins=plugins)
        except ConfigError as exc:
            why = refusal_text(exc.problems) if spec.refused == "skip" else None
            if why is not None:
                refused.append(replace(trial, refused=why))
                continue
            # the same problem for every seed of a grid point is reported once, naming the point
            problems += [_named(f"grid point ({where})", p) for p in exc.problems]
            continue
        trials.append(trial)
        scenarios.append(sc)
    if not problems and refused and not trials:
        problems.append(Problem("refused", f"every trial is refused by declaration ({refused[0].refused}); "
                                           "nothing would run", spec.refused))
    if problems:
        unique = {p.format(): p for p in problems}  # values may be unhashable (a section): key on the text
        raise ConfigError([*unique.values(), *_skip_hint(problems)], source)
    return trials, scenarios, refused


def _skip_hint(problems: Sequence[Problem]) -> list[Problem]:
    """A closing line where some problems are refusals by declaration: how to record them instead."""
    if not any(p.refused for p in problems):
        return []
    return [Problem("refused", "some trials are refused by declaration (a policy where the protocol takes none); "
                               "`refused: skip` records them as refused and runs the others; allowed: error, skip",
                    "error")]


def check_trials(spec: SweepSpec, source: str | Path, extra: Sequence[str] = ()
                 ) -> tuple[list[tuple[Trial, Scenario | None]], list[Problem]]:
    """Load and validate every trial of the sweep file ``source`` (``hierfl validate SWEEP_FILE``).

    Returns each trial with its scenario (None where invalid or refused) and every problem, its key
    path led by the trial's id (``trial t003_straggler=deadline_seed=1: straggler.seconds: ...``), one
    per trial and problem (not merged over seeds as :func:`expand` does). Under ``refused: skip`` a
    trial refused by declaration is no problem: it comes back with ``Trial.refused`` set. ``extra``
    overrides go after the trial's own. A missing base scenario file is a :class:`ConfigError`.
    """
    source = str(source)
    base_map = bases(spec, Path(source).parent)
    base = base_map.get(None, (None, []))[0]
    out: list[tuple[Trial, Scenario | None]] = []
    problems: list[Problem] = []
    for trial, base_path, _ in _points(spec, base, source, Path(source).parent):
        try:
            sc: Scenario | None = load_scenario(base_path, [*trial.overrides, *extra], seed=trial.seed)
        except ConfigError as exc:
            sc = None
            why = refusal_text(exc.problems) if spec.refused == "skip" else None
            if why is not None:
                trial = replace(trial, refused=why)
            else:
                problems += [_named(f"trial {trial.id}", p) for p in exc.problems]
        out.append((trial, sc))
    return out, [*problems, *_skip_hint(problems)]


def looks_like_sweep(raw: Any) -> bool:
    """Whether a YAML mapping is a sweep file rather than a scenario: it names a base scenario
    (``scenario`` / ``scenarios``), or has ``grid`` / ``seeds`` and no scenario section."""
    if not isinstance(raw, dict):
        return False
    if "scenario" in raw or "scenarios" in raw:
        return True
    sections = set(Scenario.model_fields) - {"name", "seed"}
    return bool({"grid", "seeds"} & set(raw)) and not (sections & set(raw))


_NO_VALUE = Problem("", "").value  # the sentinel of a Problem without a value
