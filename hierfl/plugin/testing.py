"""The conformance suite a user runs on their own plug-in: ``hierfl check PLUGIN.py`` or :func:`check_plugin`.

For each method the plug-in registers (a protocol, a trainer, or a straggler policy, run under
:data:`hierfl.methods.HOST_PROTOCOL`), a tiny scenario (a few devices, a small synthetic dataset, a few virtual seconds) runs:

* ``valid``: the tiny scenario with the method validates (with two edge servers, if it needs them);
* ``repeatable``: two runs with the local executor give identical bits (final model, metrics,
  timeline) — a plug-in that draws from a global RNG or reads the clock fails here;
* ``ray = local``: the same run on Ray with 2 workers gives the same bits (one Ray instance serves
  every check; an instance already up is used);
* ``resume``: a run stopped after a checkpoint and resumed (:func:`hierfl.driver.run.resume_run`)
  ends exactly as the uninterrupted one;
* ``timing``: emulated times do not depend on the learning: with ``training.trainer: none`` (a
  protocol or a policy) or another learning rate (a trainer) every metrics line keeps its virtual
  time and order. A protocol that declares ``decides_on_models`` is skipped, saying why;
* ``declarations``: what the method declares agrees with what it does (a serverless protocol never
  aggregates at the cloud, any other does; no cloud aggregation combines more updates than
  ``expected_inputs`` says; a trainer's job method keeps per-device state exactly when it declares
  ``keeps_device_state``).

Outputs compared ignore only wall-clock fields (``wall_s``, ``startup_s``, ``startup``) and the
executor's own name and worker count. A bad plug-in (not found, fails to import, wrong API
version) raises :class:`~hierfl.config.errors.ConfigError`: the CLI exits 2.

In pytest::

    from hierfl.plugin.testing import check_plugin

    def test_my_plugin_conforms():
        report = check_plugin("my_method.py")
        assert report.passed, report.table()
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np

from hierfl.config.errors import ConfigError, Problem

__all__ = ["TINY", "CheckResult", "CheckReport", "check_plugin", "methods_of", "comparable_lines"]

Status = Literal["PASS", "FAIL", "SKIP"]

TINY: dict[str, Any] = {
    "name": "conformance",
    "seed": 5,
    "data": {"dataset": {"name": "blobs", "num_samples": 240, "test_samples": 120, "num_features": 5,
                         "num_classes": 3, "separation": 2.0},
             "partition": {"name": "iid"}},
    "model": {"name": "logreg"},
    "devices": {"count": 6, "speed_sps": {"dist": "uniform", "low": 80, "high": 200}, "uplink_mbps": 1.0,
                "downlink_mbps": 2.0, "latency_ms": 20},
    "training": {"epochs": 1, "batch_size": 10, "lr": 0.1},
    "evaluation": {"every_s": 1.0},
    "stop": {"virtual_time_s": 4.0},
    "runtime": {"executor": "local", "checkpoint": {"every_cloud_aggregations": 1, "every_s": None}},
    "output": {"trace": "all"},
}
"""The tiny scenario every method runs on (its ``protocol``/``training.trainer``/``straggler`` is set per method)."""

# wall-clock fields, and the executor's identity: everything else must be the same bits
_WALL_KEYS = frozenset({"wall_s", "startup_s", "startup", "executor", "workers"})


@dataclass(frozen=True)
class CheckResult:
    """One check of one method."""

    method: str   # "protocol my_protocol"
    check: str    # "ray = local"
    status: Status
    detail: str = ""


@dataclass
class CheckReport:
    """Every check of a plug-in; :attr:`passed` when none failed."""

    plugin: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No check failed."""
        return all(r.status != "FAIL" for r in self.results)

    def table(self) -> str:
        """The PASS/FAIL table, one line per check."""
        if not self.results:
            return (f"{self.plugin}: registers no protocol, trainer or straggler policy, so no method to run "
                    "(its other plug-ins are checked where a scenario names them)")
        w_method = max(len("method"), *(len(r.method) for r in self.results))
        w_check = max(len("check"), *(len(r.check) for r in self.results))
        lines = [f"{'method':<{w_method}}  {'check':<{w_check}}  result  detail",
                 f"{'-' * w_method}  {'-' * w_check}  ------  ------"]
        lines += [f"{r.method:<{w_method}}  {r.check:<{w_check}}  {r.status:<6}  {r.detail}" for r in self.results]
        failed = sum(r.status == "FAIL" for r in self.results)
        lines.append(f"{self.plugin}: " + ("PASS" if self.passed else f"FAIL ({failed} check(s) failed)"))
        return "\n".join(lines)


def methods_of(module: str) -> list[tuple[str, Any]]:
    """What ``module`` registered that the suite runs: ``("protocol", cls)``, ``("trainer", cls)``,
    ``("straggler policy", cls)``, in that order."""
    from hierfl.learn.trainers import TRAINERS
    from hierfl.policies.straggler import STRAGGLERS
    from hierfl.protocols.base import PROTOCOLS

    out: list[tuple[str, Any]] = []
    for registry in (PROTOCOLS, TRAINERS, STRAGGLERS):
        out += [(registry.kind, registry.get(n)) for n in registry.names() if _within(registry.get(n).__module__, module)]
    return out


def comparable_lines(run_dir: Path) -> list[dict[str, Any]]:
    """``metrics.jsonl`` without its wall-clock fields (what two runs of one scenario must share)."""
    lines = []
    for text in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        if text.strip():
            lines.append({k: v for k, v in json.loads(text).items() if k not in _WALL_KEYS})
    return lines


def _timeline(run_dir: Path) -> list[Any]:
    """The trace's spans in virtual time (what happened when, on which lane)."""
    path = run_dir / "trace.json"
    if not path.is_file():
        return []
    events = json.loads(path.read_text(encoding="utf-8"))
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    return [(e.get("ph"), e.get("name"), e.get("ts"), e.get("dur"), e.get("pid"), e.get("tid"))
            for e in events if e.get("ph") in ("X", "B", "E", "i", "I")]


@dataclass
class _Run:
    dir: Path
    params: np.ndarray
    lines: list[dict[str, Any]]
    timeline: list[Any]
    summary: dict[str, Any]


def _collect(run_dir: Path, params: np.ndarray, summary: dict[str, Any]) -> _Run:
    return _Run(run_dir, np.asarray(params), comparable_lines(run_dir), _timeline(run_dir), summary)


def _difference(a: _Run, b: _Run) -> str | None:
    """Where two runs differ first (None: the same bits)."""
    if a.params.shape != b.params.shape or a.params.tobytes() != b.params.tobytes():
        return "final models differ"
    for i, (x, y) in enumerate(zip(a.lines, b.lines)):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            return f"metrics line {i + 1} ({x.get('event')} at t={x.get('t')}) differs in {', '.join(keys)}"
    if len(a.lines) != len(b.lines):
        return f"{len(a.lines)} vs {len(b.lines)} metrics lines"
    if a.timeline != b.timeline:
        return "timelines (trace.json) differ"
    return None


def _times(run: _Run) -> list[tuple[Any, ...]]:
    """The emulated schedule: each metrics line's virtual time, kind and round (no learned values)."""
    return [(line.get("t"), line.get("event"), line.get("round"), line.get("participants"))
            for line in run.lines]


class _Suite:
    """Runs one method's checks (a plain object: the CLI and the pytest helper share it)."""

    def __init__(self, workdir: Path, ray: bool, say: Callable[[str], None]) -> None:
        self.workdir = workdir
        self.ray = ray
        self.say = say
        self.count = 0

    def _dir(self, label: str) -> Path:
        self.count += 1
        return self.workdir / f"{self.count:02d}-{label}"

    def scenario(self, kind: str, cls: Any) -> Any:
        """The tiny scenario with the method; ConfigError when it cannot be made valid."""
        from hierfl.methods import HOST_PROTOCOL
        from hierfl.scenario.loader import deep_merge, validate_raw

        example = getattr(cls, "example", None)
        if kind == "straggler policy":
            config = example() if example is not None else cls.model_validate({"name": _name(cls)})
            setting: dict[str, Any] = {"protocol": dict(HOST_PROTOCOL),
                                       "straggler": config.model_dump(mode="json")}
        elif kind == "trainer":
            config = example() if example is not None else cls.model_validate({"name": _name(cls)})
            setting = {"protocol": dict(HOST_PROTOCOL),
                       "training": {"trainer": config.model_dump(mode="json")}}
        else:
            config = example() if example is not None else cls.model_validate({"name": _name(cls)})
            setting = {"protocol": config.model_dump(mode="json")}
        raw = deep_merge(copy.deepcopy(TINY), setting)
        try:
            return validate_raw(raw, "conformance scenario")
        except ConfigError as flat:  # a hierarchical method: give it edge servers
            try:
                return validate_raw(deep_merge(raw, {"topology": {"edge_servers": 2}}), "conformance scenario")
            except ConfigError:
                raise flat from None

    def run(self, scenario: Any, label: str, executor: str = "local", stop_at: float | None = None) -> _Run | None:
        """One run; ``stop_at``: interrupt it after the first event at or past that virtual time (None
        returned: the run was interrupted, its checkpoint left)."""
        from hierfl.driver import run_scenario

        runtime = scenario.runtime.model_copy(update={"executor": executor, "workers": 2 if executor == "ray" else "auto"})
        scenario = scenario.model_copy(update={"runtime": runtime})
        out = self._dir(label)

        def progress(t: float, rounds: int, acc: float | None) -> None:
            if stop_at is not None and t >= stop_at:
                raise KeyboardInterrupt  # as Ctrl-C: the run ends "interrupted", its last checkpoint kept

        try:
            result = run_scenario(scenario, out, progress=progress if stop_at is not None else None)
        except KeyboardInterrupt:
            if stop_at is None:
                raise
            return None
        return _collect(out, result.final_params, result.summary)

    def resume(self, run_dir: Path) -> _Run:
        from hierfl.driver.run import resume_run

        result = resume_run(run_dir)
        return _collect(run_dir, result.final_params, result.summary)

    def check(self, kind: str, cls: Any) -> Iterator[CheckResult]:
        """Every check of one method, as they finish."""
        method = f"{kind} {_name(cls)}"
        try:
            scenario = self.scenario(kind, cls)
        except ConfigError as exc:
            yield CheckResult(method, "valid", "FAIL", "; ".join(p.format() for p in exc.problems)[:300])
            return
        yield CheckResult(method, "valid", "PASS", f"{scenario.devices.count} devices, "
                          f"{scenario.topology.edge_servers} edge servers, {scenario.stop.virtual_time_s:g} s")
        try:
            first = self.run(scenario, "local")
            second = self.run(scenario, "local-again")
        except Exception as exc:  # noqa: BLE001 - the method's own failure is the result
            yield CheckResult(method, "runs", "FAIL", f"{type(exc).__name__}: {exc}"[:300])
            return
        assert first is not None and second is not None  # noqa: S101 - not interrupted
        yield CheckResult(method, "runs", "PASS", f"{first.summary.get('rounds')} rounds, final accuracy "
                          f"{_fmt(first.summary.get('final_accuracy'))}")
        diff = _difference(first, second)
        yield CheckResult(method, "repeatable", "FAIL" if diff else "PASS",
                          f"two local runs: {diff} (a global RNG, the clock or set order?)" if diff else
                          "two local runs: identical bits")
        if self.ray:
            yield self._ray_check(method, scenario, first)
        else:
            yield CheckResult(method, "ray = local", "SKIP", "--no-ray")
        yield self._resume_check(method, scenario, first)
        yield self._timing_check(method, kind, cls, scenario, first)
        yield self._declarations_check(method, kind, scenario, first)

    def _ray_check(self, method: str, scenario: Any, local: _Run) -> CheckResult:
        try:
            on_ray = self.run(scenario, "ray", executor="ray")
        except Exception as exc:  # noqa: BLE001
            return CheckResult(method, "ray = local", "FAIL", f"{type(exc).__name__}: {exc}"[:300])
        assert on_ray is not None  # noqa: S101
        diff = _difference(local, on_ray)
        return CheckResult(method, "ray = local", "FAIL" if diff else "PASS",
                           f"Ray, 2 workers: {diff}" if diff else "Ray, 2 workers: identical bits")

    def _resume_check(self, method: str, scenario: Any, whole: _Run) -> CheckResult:
        stop = float(scenario.stop.virtual_time_s) / 2
        try:
            cut = self.run(scenario, "interrupted", stop_at=stop)
            if cut is not None:
                return CheckResult(method, "resume", "SKIP", f"the run ended before t={stop:g} s")
            resumed = self.resume(self.workdir / f"{self.count:02d}-interrupted")
        except Exception as exc:  # noqa: BLE001
            return CheckResult(method, "resume", "FAIL", f"{type(exc).__name__}: {exc}"[:300])
        diff = _difference(whole, resumed)
        return CheckResult(method, "resume", "FAIL" if diff else "PASS",
                           f"stopped at t={stop:g} s and resumed: {diff}" if diff else
                           f"stopped at t={stop:g} s and resumed: identical bits")

    def _timing_check(self, method: str, kind: str, cls: Any, scenario: Any, learned: _Run) -> CheckResult:
        decides = getattr(type(scenario.protocol), "decides_on_models", None)
        if decides:
            return CheckResult(method, "timing", "SKIP", f"declares decides_on_models: {decides}")
        if kind == "trainer":  # its own work factor sets its compute time: vary the learning instead
            changed = {"training": scenario.training.model_copy(update={"lr": scenario.training.lr * 0.5})}
            what = "half the learning rate"
        else:
            from hierfl.learn.trainers import NoTrainer

            changed = {"training": scenario.training.model_copy(update={"trainer": NoTrainer()})}
            what = "timing only (training.trainer: none)"
        try:
            from hierfl.scenario.loader import validate_raw

            other = validate_raw(scenario.model_copy(update=changed).model_dump(mode="json"), "conformance scenario")
        except ConfigError as exc:
            return CheckResult(method, "timing", "SKIP", f"{what} is refused: {exc.problems[0].format()}"[:300])
        try:
            run = self.run(other, "timing")
        except Exception as exc:  # noqa: BLE001
            return CheckResult(method, "timing", "FAIL", f"{what}: {type(exc).__name__}: {exc}"[:300])
        assert run is not None  # noqa: S101
        a, b = _times(learned), _times(run)
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return CheckResult(method, "timing", "FAIL", f"{what}: line {i + 1} is {y} instead of {x}: emulated "
                                   "times depend on the learned values (declare decides_on_models if they must)")
        if len(a) != len(b):
            return CheckResult(method, "timing", "FAIL", f"{what}: {len(b)} metrics lines instead of {len(a)}")
        return CheckResult(method, "timing", "PASS", f"{what}: the same emulated times")

    def _declarations_check(self, method: str, kind: str, scenario: Any, run: _Run) -> CheckResult:
        proto = scenario.protocol
        cloud = [line for line in run.lines if line.get("event") == "cloud_aggregate"]
        if type(proto).serverless and cloud:
            return CheckResult(method, "declarations", "FAIL", f"declares serverless but aggregated at the cloud "
                               f"{len(cloud)} times")
        if not type(proto).serverless and not cloud and run.summary.get("rounds", 0) == 0:
            return CheckResult(method, "declarations", "FAIL", f"no cloud aggregation in {scenario.stop.virtual_time_s:g} "
                               "virtual seconds (serverless protocols declare serverless = True)")
        expected = proto.expected_inputs(scenario.devices.count, int(scenario.topology.edge_servers or 0)).get("cloud")
        if expected is not None:
            over = [line for line in cloud if isinstance(line.get("participants"), int)
                    and line["participants"] > expected]
            if over:
                return CheckResult(method, "declarations", "FAIL", f"expected_inputs says {expected} updates per cloud "
                                   f"aggregation, one combined {over[0]['participants']}")
        said = f"{len(cloud)} cloud aggregations" + (f", at most {expected} updates each" if expected is not None else "")
        state = _state_problem(scenario, run)
        if state is not None:
            return CheckResult(method, "declarations", "FAIL", state)
        return CheckResult(method, "declarations", "PASS", said)


def _state_problem(scenario: Any, run: _Run) -> str | None:
    """What a trainer's job method declares of per-device state against what the run kept, or None if they agree:
    a job that keeps state says so (``keeps_device_state``: it then runs on its device's home host, never batched)
    and a job that says so keeps some."""
    from hierfl.assemble import train_spec

    job = train_spec(scenario).method
    kept = int((run.summary.get("device_state") or {}).get("bytes", 0) or 0)
    if job is None:
        return None
    declared = bool(type(job).keeps_device_state)
    if kept and not declared:
        return (f"{type(job).__name__} kept {kept} bytes of per-device state but does not declare "
                "keeps_device_state = True (its jobs could run on another host and lose it)")
    if declared and not kept and run.summary.get("rounds", 0):
        return f"{type(job).__name__} declares keeps_device_state but no device kept any state"
    return None


def _registers_anything(module: str) -> bool:
    from hierfl.config.registry import Registry
    from hierfl.learn.server_tasks import SERVER_TASKS

    return (any(_within(reg.get(n).__module__, module) for reg in Registry.instances() for n in reg.names())
            or any(_within(getattr(fn, "__module__", None), module) for fn in SERVER_TASKS.values()))


def _within(name: str | None, module: str) -> bool:
    """Whether ``name`` is the plug-in's module or one of its sub-modules (a package folder's)."""
    return name is not None and (name == module or name.startswith(module + "."))


def _name(cls: Any) -> str:
    field_ = cls.model_fields.get("name")
    return str(field_.default) if field_ is not None else cls.__name__


def _fmt(value: Any) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


@contextmanager
def _ray_instance(wanted: bool) -> Iterator[bool]:
    """One local Ray instance (2 CPUs) for every Ray check; one already up is used and left up."""
    if not wanted:
        yield False
        return
    import logging

    import ray

    started = False
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)
        started = True
    try:
        yield True
    finally:
        if started:
            ray.shutdown()


def check_plugin(plugin: str | Path, *, ray: bool = True, out: TextIO | None = None, quiet: bool = True,
                 workdir: str | Path | None = None) -> CheckReport:
    """Run the conformance suite on a plug-in file or module (see the module docstring).

    Parameters
    ----------
    plugin : str
        The plug-in: a ``.py`` file's path or a module name (loaded as ``--plugin`` loads it).
    ray : bool
        Also run each method on Ray with 2 workers (an instance already up is used).
    out : optional
        A text stream where the table (and, unless ``quiet``, each result as it comes) is written.
    workdir : path, optional
        Where the runs are written (a temporary folder by default, removed afterwards).

    Raises
    ------
    ConfigError
        The plug-in cannot be loaded (not found, import error, taken name, API version).
    """
    from hierfl.config.plugins import PluginError, load_plugin

    try:
        ref = load_plugin(str(plugin))
    except PluginError as exc:
        raise ConfigError([Problem("", exc.reason)], exc.spec) from None
    report = CheckReport(ref.describe())
    if not _registers_anything(ref.module):
        raise ConfigError([Problem("", "registers nothing: no class of it is in any registry (a plug-in "
                                       "decorates its config classes with @REGISTRY.register)")], ref.describe())

    def say(text: str) -> None:
        if out is not None:
            print(text, file=out, flush=True)

    methods = methods_of(ref.module)
    with tempfile.TemporaryDirectory(prefix="hierfl-check-") as tmp, _ray_instance(ray and bool(methods)) as on_ray:
        suite = _Suite(Path(workdir) if workdir is not None else Path(tmp), on_ray, say)
        suite.workdir.mkdir(parents=True, exist_ok=True)
        for kind, cls in methods:
            for result in suite.check(kind, cls):
                report.results.append(result)
                if not quiet:
                    say(f"  {result.status:<4}  {result.method}: {result.check}: {result.detail}")
    say(report.table())
    return report
