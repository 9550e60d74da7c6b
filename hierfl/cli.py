"""``hierfl`` command line: run, resume, validate, check, plot, timeline, report, sweep, table, schema, data.

User mistakes (bad scenario, missing file, bad ``--set``) print every problem without a
traceback and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

EXIT_USAGE = 2

MAX_DEVICE_LANES = 48
"""Device lanes a timeline draws by default (``hierfl timeline`` and ``hierfl report`` alike)."""

# the command's own clock: the summary line reports the real seconds since launch (imports, data,
# executor start-up), not only the run's
_LAUNCHED = time.perf_counter()


def _console() -> Any:
    """rich's console on stderr; lines are never wrapped (a log piped to a file keeps one line per message)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def _load(args: argparse.Namespace):  # noqa: ANN202 - returns Scenario
    from hierfl.scenario.loader import load_scenario

    overrides = list(args.set or [])
    if getattr(args, "address", None):
        overrides.append(f"runtime.address={args.address}")
    if getattr(args, "executor", None):
        overrides.append(f"runtime.executor={args.executor}")
    if getattr(args, "workers", None):
        overrides.append(f"runtime.workers={args.workers}")
    _load_plugins(args)  # first: a bad --plugin is reported as the command line's, not the scenario's
    return load_scenario(args.scenario, overrides, seed=args.seed, plugins=_plugins(args))


def _plugins(args: argparse.Namespace) -> list[str]:
    """``--plugin`` values (files relative to the working directory, or module names)."""
    return list(getattr(args, "plugin", None) or [])


def _load_plugins(args: argparse.Namespace) -> None:
    """Load ``--plugin`` now (a command that validates no scenario of its own: sweep, schema, resume)."""
    from hierfl.config.plugins import load_plugins

    load_plugins(_plugins(args), key="--plugin", source="command line")


def _is_sweep_file(path: str) -> bool:
    """Whether ``path`` reads as a sweep file (a scenario, or anything unreadable, is left to the scenario loader)."""
    from hierfl.config.yamlsafe import load_yaml
    from hierfl.sweep.spec import looks_like_sweep

    try:
        return looks_like_sweep(load_yaml(Path(path).read_text(encoding="utf-8")))
    except Exception:  # noqa: BLE001 - not readable here: the scenario loader says what is wrong
        return False


def _built_checks(scenario: Any, source: str, prefix: str = "") -> Any:
    """Generate the data and model of ``scenario`` and run the checks that need them (``--build``)."""
    from hierfl.assemble import build
    from hierfl.config.errors import ConfigError, Problem
    from hierfl.driver.sanity import run_problems, run_warnings

    built = build(scenario, source)
    never = run_problems(scenario, built)
    if never:
        raise ConfigError([Problem(f"{prefix}{key}", msg) for key, msg in never], source)
    for warning in run_warnings(scenario, built):
        print(f"warning: {prefix}{warning}", file=sys.stderr)
    return built


def _describe(scenario: Any, built: Any) -> str:
    return (f"{scenario.name}: protocol {scenario.protocol.name}, "
            f"{scenario.devices.count} devices, {scenario.topology.edge_servers} edge servers, "
            f"dataset {scenario.data.dataset.name}/{scenario.data.partition.name}, model {scenario.model.name}"
            + (f", {built.num_params} parameters" if built else ""))


def _validate_sweep(args: argparse.Namespace) -> int:
    """``hierfl validate SWEEP_FILE``: the sweep file, then every trial it expands to, each named."""
    from hierfl.config.errors import ConfigError, Problem
    from hierfl.sweep.spec import check_trials, load_sweep

    if args.seed is not None:
        raise ConfigError([Problem("--seed", "a sweep file sets its trials' seeds (`seeds:`); leave out --seed")],
                          "command line")
    _load_plugins(args)  # before the trials are validated: their scenarios may name the plug-ins' methods
    spec = load_sweep(args.scenario)
    try:
        trials, problems = check_trials(spec, args.scenario, extra=list(args.set or []))
    except ConfigError as exc:  # a base scenario file not found
        raise ConfigError(exc.problems, args.scenario) from None
    refused = [t for t, _ in trials if t.refused is not None]
    if not problems and refused and len(refused) == len(trials):
        problems = [Problem("refused", "every trial is refused by declaration; nothing would run", spec.refused)]
    if problems:
        bad = sum(sc is None and t.refused is None for t, sc in trials)
        raise ConfigError([*problems, Problem("", f"{bad} of {len(trials)} trials invalid")], args.scenario)
    for trial, scenario in trials:
        if trial.refused is not None:  # `refused: skip`: the sweep records it and runs the others
            print(f"  trial {trial.id}: refused: {trial.refused}")
            continue
        built = _built_checks(scenario, args.scenario, f"trial {trial.id}: ") if args.build else None
        print(f"  trial {trial.id}: OK — {_describe(scenario, built)}")
    runs = len(trials) - len(refused)
    print(f"{args.scenario}: OK — sweep {spec.name}: all {runs} trials valid"
          + (f", {len(refused)} refused by declaration (skipped)" if refused else ""))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    if _is_sweep_file(args.scenario):
        return _validate_sweep(args)
    scenario = _load(args)
    built = _built_checks(scenario, args.scenario) if args.build else None
    if built is None:  # with --build, the built checks print these among theirs
        from hierfl.scenario.checks import scenario_warnings

        for warning in scenario_warnings(scenario):
            print(f"warning: {warning}", file=sys.stderr)
    print(f"{args.scenario}: OK — {_describe(scenario, built)}")
    return 0


def _out_problem(exc: Exception) -> Exception:
    """A :class:`~hierfl.output.rundir.RunDirError` as a configuration error under ``--out`` (exit 2)."""
    from hierfl.config.errors import ConfigError, Problem

    return ConfigError([Problem("--out", exc.message, str(exc.path))], "command line")  # type: ignore[attr-defined]


def _cmd_run(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from hierfl.driver import RunError, run_scenario
    from hierfl.driver.run import start_and_build
    from hierfl.driver.sanity import run_problems, run_warnings
    from hierfl.output.files import OutputWriteError
    from hierfl.output.rundir import RunDirError, check_out_dir, prepare_dir

    scenario = _load(args)
    out = Path(args.out) if args.out else Path("runs") / scenario.name
    try:  # before the build: a bad --out must not cost the data generation, nor leave anything
        check_out_dir(out, force=args.force)
    except RunDirError as exc:
        raise _out_problem(exc) from None
    # Ray starts while the data is generated; build errors are config errors: nothing written yet
    start, built = start_and_build(scenario, args.scenario)
    try:
        never = run_problems(scenario, built)
        if never:
            from hierfl.config.errors import ConfigError, Problem

            raise ConfigError([Problem(key, msg) for key, msg in never], args.scenario)
        leftover = prepare_dir(out, force=args.force)
    except RunDirError as exc:
        start.close()
        raise _out_problem(exc) from None
    except BaseException:
        start.close()
        raise
    console = _console()
    if leftover:
        console.print(f"[yellow]warning:[/yellow] {escape(str(out))} keeps files the run does not write (from "
                      f"before, left untouched): {escape(', '.join(leftover[:8]))}{' …' if len(leftover) > 8 else ''}")
    for warning in (built.dynamics.warnings if built.dynamics else []):
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    for warning in run_warnings(scenario, built):
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    budget = scenario.stop.virtual_time_s
    total = budget if budget is not None else float(scenario.stop.rounds or 1)
    state: dict[str, float | None] = {"acc": None}
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=console, disable=args.quiet, transient=False) as bar:
        task = bar.add_task(scenario.name, total=total, info="starting…")

        shown = [0.0]

        def progress(t: float, rounds: int, acc: float | None) -> None:
            # called after every event: the bar is redrawn at most 10 times a second, and at each
            # evaluation (a redraw costs far more than a fast event)
            if acc is not None:
                state["acc"] = acc
            else:
                wall = time.perf_counter()
                if wall - shown[0] < 0.1:
                    return
                shown[0] = wall
            done = min(t, total) if budget is not None else min(rounds, total)
            acc_txt = "–" if state["acc"] is None else f"{state['acc']:.4f}"
            bar.update(task, completed=done, info=f"t={t:,.1f}s round {rounds} acc {acc_txt}")

        try:
            result = run_scenario(scenario, out, progress=progress, source=args.scenario, built=built,
                                  start=start)
            ended = time.perf_counter()
        except RunError as exc:
            return _run_failed(console, exc, out)
        except OutputWriteError as exc:
            console.print(f"[red]run failed:[/red] {escape(str(exc))}")
            return 1
    s = result.summary
    ttt = "not reached" if s["time_to_target_s"] is None else f"{s['time_to_target_s']:.1f}s"
    wall, startup = _real_times(s, ended)
    console.print(f"done: {s['rounds']} rounds, virtual {s['virtual_time_s']:.1f}s, "
                  f"final accuracy {_acc(s['final_accuracy'])}, time to target {ttt}, "
                  f"wall {wall:.1f}s (start-up {startup:.1f}s) → {out}")
    return 0


def _real_times(summary: dict[str, Any], ended: float) -> tuple[float, float]:
    """The command's real seconds from launch to the run's end, and of those the start-up: everything
    before the run's first event (imports, loading the scenario, the data, the executor's start)."""
    wall = ended - _LAUNCHED
    running = max(0.0, float(summary["wall_s"]) - float(summary["startup_s"]))  # first event to the end
    return wall, max(0.0, wall - running)


def _cmd_resume(args: argparse.Namespace) -> int:
    """``hierfl resume RUN_DIR``: continue an interrupted, killed or failed run from its checkpoint."""
    from hierfl.driver import RunError, resume_run

    console = _console()
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"error: {run_dir}: no such run directory", file=sys.stderr)
        return EXIT_USAGE
    _load_plugins(args)  # a plug-in the checkpoint needs, given again (e.g. moved since)
    try:
        from hierfl.driver.checkpoint import load_checkpoint

        ckpt = load_checkpoint(run_dir)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not args.quiet:
        console.print(f"resuming {ckpt.scenario.name} from its checkpoint at t={ckpt.t:.1f}s "
                      f"(round {ckpt.rounds}) in {run_dir}")
    try:
        result = resume_run(run_dir)
    except RunError as exc:
        return _run_failed(console, exc, run_dir)
    s = result.summary
    console.print(f"done: {s['rounds']} rounds, virtual {s['virtual_time_s']:.1f}s, "
                  f"final accuracy {_acc(s['final_accuracy'])} → {run_dir}")
    return 0


def _run_failed(console: Any, exc: Exception, out: Path) -> int:
    """A run that failed or diverged: one line saying why (unless the run printed it as it happened,
    as it does for a lost Ray cluster), and where its files are; exit status 1."""
    from rich.markup import escape

    if not getattr(exc, "announced", False):
        # escaped: messages carry brackets rich would take for markup (Ray's "pip install ray[client]")
        status = "diverged" if getattr(exc, "status", None) == "diverged" else "failed"
        console.print(f"[red]run {status}:[/red] {escape(str(exc))}\nmetrics so far are in {out}/metrics.jsonl")
    return 1


def _acc(value: float | None) -> str:
    """An accuracy for the console (timing-only runs have none)."""
    return "– (timing only)" if value is None else f"{value:.4f}"


def _cmd_plot(args: argparse.Namespace) -> int:
    from hierfl.viz import plot_runs

    out = Path(args.output) if args.output else Path(args.runs[0]) / f"{args.metric}.png"
    try:
        if args.group_by is not None or (len(args.runs) == 1 and (Path(args.runs[0]) / "sweep.json").is_file()):
            from hierfl.sweep.aggregate import plot_sweep

            if len(args.runs) != 1:
                raise ValueError("--group-by takes one sweep directory")
            if not (Path(args.runs[0]) / "sweep.json").is_file():
                raise ValueError(f"{args.runs[0]}: --group-by takes a sweep directory (with sweep.json); "
                                 "for run directories leave out --group-by")
            path = plot_sweep(args.runs[0], out, group_by=args.group_by, metric=args.metric, x=args.x,
                              title=args.title)
        else:
            path = plot_runs([Path(r) for r in args.runs], out, x=args.x, metric=args.metric, title=args.title)
    except (OSError, ValueError) as exc:  # RunReadError is a ValueError: a user mistake, not a crash
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0


def _cmd_timeline(args: argparse.Namespace) -> int:
    from hierfl.viz import plot_timeline

    out = Path(args.output) if args.output else Path(args.run) / "timeline.png"
    try:
        path = plot_timeline(Path(args.run), out, max_devices=args.max_devices, t_max=args.t_max)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from hierfl.report import write_report

    try:
        path = write_report(args.dir, args.output, max_devices=args.max_devices, group_by=args.group_by)
    except (OSError, ValueError) as exc:  # RunReadError is a ValueError: not a run, damaged files
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(path)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from hierfl.sweep.run import run_sweep

    if (args.sweep is None) == (args.resume is None):
        print("error: give a sweep file, or --resume SWEEP_DIR (not both)", file=sys.stderr)
        return EXIT_USAGE
    from hierfl.runtime.ray_auth import ClusterAuthError

    try:
        result = run_sweep(args.sweep, args.out, resume=args.resume, address=args.address, quiet=args.quiet,
                           plugins=_plugins(args))
    except ClusterAuthError as exc:  # a start-up failure, as for `hierfl run`: one line, status 1
        print(f"sweep failed: cannot join the Ray cluster: {exc}", file=sys.stderr)
        return 1
    c = result["counts"]
    # one line per refused grid point (its seeds share the reason), not one per trial
    for point, why in result.get("refused", {}).items():
        print(f"refused: {point}: {why}", file=sys.stderr)
    print(f"sweep: {c['completed']} completed, {c['failed']} failed, {c['not run']} not run"
          + (f", {c['refused']} refused" if c.get("refused") else "")
          + f" → {result['dir']}/sweep.csv", file=sys.stderr)
    return 0 if c["failed"] == 0 and c["not run"] == 0 else 1


def _cmd_table(args: argparse.Namespace) -> int:
    from hierfl.sweep.aggregate import sweep_table, table_csv, table_markdown

    try:
        rows = sweep_table(args.sweep_dir, group_by=args.group_by, metric=args.metric)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(table_csv(rows) if args.format == "csv" else table_markdown(rows, args.metric, args.group_by), end="")
    if args.csv:
        Path(args.csv).write_text(table_csv(rows), encoding="utf-8")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from hierfl.scenario.jsonschema import scenario_json_schema

    _load_plugins(args)  # their names and keys are then part of the schema
    text = json.dumps(scenario_json_schema(), indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(args.output)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """``hierfl check PLUGIN``: the conformance suite on a user's plug-in (exit 0 all pass, 1 a failure)."""
    from hierfl.plugin.testing import check_plugin

    report = check_plugin(args.plugin_file, ray=not args.no_ray, out=sys.stdout, quiet=args.quiet)
    return 0 if report.passed else 1


def _cmd_data_fetch(args: argparse.Namespace) -> int:
    from hierfl.data.fetch import FetchError, fetch

    try:
        path = fetch(args.name, root=args.root, source=args.source, quiet=args.quiet)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.status
    print(path)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hierfl", description="Hierarchical, asynchronous federated-learning emulator "
                                "on edge networks, in emulated (virtual) wall-clock time. A user mistake (a bad "
                                "scenario, a missing file, a bad --set) prints every problem without a traceback "
                                "and exits with status 2.")
    p.add_argument("--version", action="version", version=f"hierfl {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, details: str = "") -> argparse.ArgumentParser:
        # the one-line summary lists the command under `hierfl -h`; its page opens with the summary and details
        # (help strings are %-formatted, descriptions are not: a literal % is %% in the one only)
        text = f"{summary[0].upper()}{summary[1:]}." + (f" {details}" if details else "")
        return sub.add_parser(name, help=summary, description=text.replace("%%", "%"))

    def scenario_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("scenario", help="scenario YAML file")
        sp.add_argument("--set", action="append", metavar="KEY.PATH=VALUE",
                        help="override a scenario key (repeatable; the value is YAML), e.g. --set protocol.fraction=0.5 "
                             "(default: none, the scenario as written)")
        sp.add_argument("--seed", type=int, help="override the scenario's seed (default: the scenario's `seed`)")
        plugin_arg(sp)

    def plugin_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--plugin", action="append", metavar="FILE.py|MODULE",
                        help="load a plug-in (a .py file or a module name) before the scenario is validated "
                             "(repeatable; default: none); also in every Ray worker and sweep trial")

    r = command("run", "run a scenario and write its run directory",
                "Prints a progress bar on stderr and, at the end, one line: rounds, emulated time, final accuracy, "
                "time to target, and the real (wall) and start-up seconds of the command.")
    scenario_args(r)
    r.add_argument("--out", help="output directory (default runs/<scenario name>)")
    r.add_argument("--address", help="connect to an existing Ray cluster (e.g. auto, ray://host:10001; "
                                     "default: runtime.address, else a local Ray instance)")
    r.add_argument("--executor", help="override runtime.executor (a registered executor: local, ray, …; "
                                      "default: the scenario's, ray when it names none)")
    r.add_argument("--workers", help="override runtime.workers (an integer or auto; default: the scenario's)")
    r.add_argument("--force", action="store_true",
                   help="replace an earlier run in --out (only the files a run writes; never other files)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar (the final line is still printed)")
    r.set_defaults(func=_cmd_run)

    rs = command("resume", "continue an interrupted or killed run from its last checkpoint",
                 "The run's files are cut back to the checkpoint and the run goes on; they end as the "
                 "uninterrupted run's would (wall-clock fields aside).")
    rs.add_argument("run_dir", help="the run directory (with checkpoint.pkl)")
    rs.add_argument("-q", "--quiet", action="store_true", help="no start message")
    plugin_arg(rs)
    rs.set_defaults(func=_cmd_resume)

    v = command("validate", "check a scenario, or every trial of a sweep file, without running it",
                "Every problem is listed at once with its key path (exit status 2).")
    scenario_args(v)
    v.add_argument("--build", action="store_true", help="also generate the data and model (catches more errors)")
    v.set_defaults(func=_cmd_validate)

    ck = command("check", "conformance suite of a plug-in: each method it registers on a tiny scenario",
                 "Runs each protocol, trainer or straggler policy the plug-in registers on a tiny scenario with the "
                 "local executor and with Ray (2 workers) and checks identical bits, resume, timing-only times and "
                 "declarations. Exit status 0 when every check passes, 1 otherwise, 2 for a bad plug-in.")
    ck.add_argument("plugin_file", metavar="PLUGIN", help="the plug-in: a .py file or a module name")
    ck.add_argument("--no-ray", action="store_true", help="skip the Ray executor's checks (default: run them)")
    ck.add_argument("-q", "--quiet", action="store_true", help="only the table (default: progress too)")
    ck.set_defaults(func=_cmd_check)

    pl = command("plot", "overlay runs: a metric against emulated wall-clock time or cloud rounds",
                 "One line per run directory; with one sweep directory, the mean and 95% band over seeds per group.")
    pl.add_argument("runs", nargs="+", help="run directories (or one sweep directory)")
    pl.add_argument("-o", "--output", help="output file; format from the extension: png, svg, pdf "
                                           "(default FIRST_RUN/<metric>.png)")
    pl.add_argument("--x", choices=["time", "round"], default="time",
                    help="x axis: emulated wall-clock time (s) or cloud rounds (default time)")
    pl.add_argument("--metric", default="accuracy",
                    help="a field of the eval lines of metrics.jsonl: accuracy, loss, bytes_cloud, … "
                         "(default accuracy)")
    pl.add_argument("--title", help="the plot's title (default: none)")
    pl.add_argument("--group-by", metavar="KEY.PATH",
                    help="with a sweep directory: mean and 95%% band over seeds per value of this scenario key "
                         "(e.g. straggler.name; default: the sweep's grid point)")
    pl.set_defaults(func=_cmd_plot)

    sw = command("sweep", "run a sweep file (grid x seeds) as Ray Tune trials",
                 "Needs hierfl[tune]. Writes SWEEP_DIR/sweep.csv and a run directory per trial under SWEEP_DIR/runs/.")
    sw.add_argument("sweep", nargs="?", help="sweep YAML file (see scenarios/sweeps/)")
    sw.add_argument("--out", help="sweep directory (default sweeps/<sweep name>)")
    sw.add_argument("--resume", metavar="SWEEP_DIR",
                    help="finish an interrupted sweep; finished trials are kept (default: start a new sweep)")
    sw.add_argument("--address", help="an existing Ray cluster (auto, HEAD:6379; default: a local Ray instance); "
                                      "for ray:// use `ray job submit`")
    sw.add_argument("-q", "--quiet", action="store_true", help="no progress view")
    plugin_arg(sw)
    sw.set_defaults(func=_cmd_sweep)

    tb = command("table", "time to target and final metric per group of a sweep, mean ± 95%% CI",
                 "Reads a sweep directory written by `hierfl sweep` (for single runs, see `hierfl plot` and "
                 "`hierfl report`).")
    tb.add_argument("sweep_dir", help="sweep directory (with sweep.json)")
    tb.add_argument("--group-by", metavar="KEY.PATH", help="scenario key to group by (default: the grid point)")
    tb.add_argument("--metric", default="accuracy", help="the eval field whose final value is tabled "
                                                         "(default accuracy)")
    tb.add_argument("--format", choices=["markdown", "csv"], default="markdown",
                    help="what is printed (default markdown)")
    tb.add_argument("--csv", metavar="FILE", help="also write the table as CSV to FILE (default: no file)")
    tb.set_defaults(func=_cmd_table)

    sc = command("schema", "print the scenario JSON Schema (for YAML language servers)")
    sc.add_argument("-o", "--output", help="write it to this file (default: standard output)")
    plugin_arg(sc)
    sc.set_defaults(func=_cmd_schema)

    da = command("data", "dataset files", "Subcommand: fetch.")
    dsub = da.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    fe = dsub.add_parser("fetch", help="download a file dataset into data/<name>/ (checksummed, resumable)",
                         description="Download a file dataset into data/<name>/ (checksummed, resumable).")
    fe.add_argument("name", help="mnist, fashion_mnist, emnist, cifar10, femnist, shakespeare")
    fe.add_argument("--root", help="target directory (default data/<name>)")
    fe.add_argument("--from", dest="source", metavar="DIR|URL",
                    help="a mirror: a local directory or a base URL (default: the dataset's own source)")
    fe.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    fe.set_defaults(func=_cmd_data_fetch)

    t = command("timeline", "Gantt picture of the cloud, leaders and devices over emulated wall-clock time",
                "The cloud, then each leader (edge server) with its devices under it, as `hierfl report` draws "
                "them; the x axis ends at the run's stop.")
    t.add_argument("run", help="run directory")
    t.add_argument("-o", "--output", help="output file; format from the extension: png, svg, pdf "
                                          "(default RUN/timeline.png)")
    t.add_argument("--max-devices", type=int, default=MAX_DEVICE_LANES,
                   help=f"device lanes drawn, taken evenly from every group (default {MAX_DEVICE_LANES})")
    t.add_argument("--t-max", type=float, help="last emulated second to draw (default: the run's stop, summary.json's virtual_time_s)")
    t.set_defaults(func=_cmd_timeline)

    rp = command("report", "one self-contained HTML page of a run or a sweep directory",
                 "Charts, the hierarchy, the timeline, per-device tables and the scenario; opens in any browser, "
                 "with no network.")
    rp.add_argument("dir", metavar="RUN_DIR|SWEEP_DIR", help="a run directory or a sweep directory")
    rp.add_argument("-o", "--output", help="the HTML file to write (default DIR/report.html)")
    rp.add_argument("--max-devices", type=int, default=MAX_DEVICE_LANES,
                    help=f"device lanes drawn in a run's timeline, taken evenly from every group "
                         f"(default {MAX_DEVICE_LANES})")
    rp.add_argument("--group-by", metavar="KEY.PATH",
                    help="a sweep: group trials by this scenario key (default: the grid point)")
    rp.set_defaults(func=_cmd_report)
    return p


def _version() -> str:
    from hierfl import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hierfl`` console script."""
    from hierfl.config.errors import ConfigError

    from hierfl.runtime.signals import sigterm_as_interrupt

    args = _parser().parse_args(argv)
    try:
        with sigterm_as_interrupt():  # SIGTERM stops a run exactly as Ctrl-C does (status interrupted, 130)
            return int(args.func(args))
    except ConfigError as exc:
        print(exc.report(), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
