"""Loading plug-ins: a user's own files and modules, installed packages' entry points, Ray workers.

The mechanics sit in the config layer (standard library and :mod:`hierfl.config` only), below the
scenario loader, the driver and the runtime that call them; the public names are re-exported by
:mod:`hierfl.plugin`.

Routes, all ending in :func:`load_plugins` before a scenario is validated:

* a scenario's ``plugins: [my_method.py, my_method_pkg/, my_package.module]`` (paths relative to the
  scenario file): a ``.py`` file, a package folder (with ``__init__.py``, imported under the folder's
  name, so its modules import each other as if installed), or an installed module's name;
* ``--plugin PATH_OR_MODULE`` on the command line (paths relative to the working directory);
* ``plugins=[...]`` in the Python API (``hierfl.run``, ``hierfl.sweep``, the loader);
* the entry-point group ``hierfl.plugins`` of installed distributions (:func:`load_entry_points`,
  once per process; an entry point names a module, or a function that registers).

A file is executed as a module named after its content hash (``hierfl_plugin_<sha256 prefix>``):
the same file always gets the same name, wherever it lies, so pickles (checkpoints, Ray arguments) find its classes
again, and a changed file cannot be mistaken for the one a checkpoint was taken with. Loading is
idempotent; a plug-in that fails part-way is rolled back (its registrations are removed).

Ray workers: every actor and every Tune trial gets :func:`bundle` (each plug-in's module name, and
a file plug-in's source text or a package folder's files) and calls :func:`install_bundle` before it unpickles anything of the
run. The source travels with the call rather than through ``runtime_env``: the executor often
attaches to a Ray instance that is already up (a cluster, a sweep's trial, the tests' shared
instance), whose job-level ``runtime_env`` cannot change, and a per-actor ``runtime_env`` would
start fresh worker processes for every run. A package folder's files are written out once per node
(under the temporary directory, keyed by their hash) and imported from there under the same name, so a
cluster's nodes need no copy of the user's folder. An installed module is imported by name in the
worker (it must be installed on every node, as hierfl itself).
"""

from __future__ import annotations

import hashlib
import json
import importlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import traceback
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from hierfl.config.errors import ConfigError, Problem

__all__ = ["API_VERSION", "ENTRY_POINT_GROUP", "PluginRef", "PluginError", "load_plugin", "load_plugins", "load_entry_points",
           "loaded_plugins", "isolated", "refs_for", "bundle", "install_bundle", "require", "file_module_name", "looks_like_path"]

API_VERSION = "1.5"
"""The plug-in API version, ``"MAJOR.MINOR"`` (re-exported as :data:`hierfl.plugin.API_VERSION`); a
plug-in's ``HIERFL_API`` must match the major."""

ENTRY_POINT_GROUP = "hierfl.plugins"
"""The entry-point group installed packages register their plug-ins under."""

Kind = Literal["file", "package", "module", "entry_point"]


@dataclass(frozen=True)
class PluginRef:
    """One loaded plug-in: what was asked for, the module it became, and its content hash."""

    spec: str                  # a file's absolute path, a module name, or ``name = value`` of an entry point
    kind: Kind
    module: str                # the module name it is imported as
    path: str | None = None    # the file it was read from (a module's own file, when it has one)
    sha256: str | None = None  # of that file's bytes
    # a file plug-in's text, or a package folder's files (JSON: relative path -> text), for workers
    source: str | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        """How a message names it: the file or folder, or the module."""
        return self.path if self.kind in ("file", "package") and self.path else self.spec

    def as_dict(self) -> dict[str, Any]:
        """A plain mapping (JSON-safe): what checkpoints, sweep manifests and Tune configs hold."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PluginRef:
        """The reverse of :meth:`as_dict`."""
        return cls(**data)

    def without_source(self) -> PluginRef:
        """The reference alone (what a checkpoint records: the plug-in must be given again to resume)."""
        return PluginRef(self.spec, self.kind, self.module, self.path, self.sha256)


class PluginError(Exception):
    """A plug-in that cannot be loaded: ``reason`` says why (shown with the file or module)."""

    def __init__(self, spec: str, reason: str) -> None:
        super().__init__(f"{spec}: {reason}")
        self.spec, self.reason = spec, reason


_LOADED: dict[str, PluginRef] = {}  # module name -> ref, in load order
_SPECS: dict[str, PluginRef] = {}   # every resolved spec loaded (a file's content may come from two paths)
_ENTRY_POINTS = {"loaded": False}


def loaded_plugins() -> list[PluginRef]:
    """Every plug-in loaded in this process, in load order."""
    return list(_LOADED.values())


def looks_like_path(spec: str) -> bool:
    """Whether ``spec`` names a file (``x.py``, anything with a slash) rather than a module (``pkg.mod``)."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec or spec.startswith("~")


def file_module_name(sha256: str) -> str:
    """The module name of a plug-in file: the first 16 hex digits of its content hash. Not its name:
    a file moved or renamed since a checkpoint is still the same plug-in, whose pickled classes
    (named by module) load again; a changed file is another module."""
    return f"hierfl_plugin_{sha256[:16]}"


def _check_api(module: ModuleType, where: str) -> None:
    declared = getattr(module, "HIERFL_API", None)
    if declared is None:
        return
    if not isinstance(declared, (str, int)) or not re.fullmatch(r"\d+(\.\d+)?", str(declared)):
        raise PluginError(where, f"HIERFL_API must be a version string like {API_VERSION.split('.')[0]!r} or "
                                 f"{API_VERSION!r}, got {declared!r}")
    if str(declared).split(".")[0] != API_VERSION.split(".")[0]:
        raise PluginError(where, f"written for plug-in API {declared} (HIERFL_API), but this hierfl provides "
                                 f"API {API_VERSION}; a different major version is not compatible")


def _failure(exc: BaseException, filename: str | None) -> str:
    """One line: the exception, and the plug-in's line it came from (no traceback: a user's mistake)."""
    from hierfl.config.registry import DuplicateName

    if isinstance(exc, DuplicateName):
        return f"registers a name already taken: {exc}"
    where = ""
    if filename is not None:  # a plug-in file, or a package folder (its files' frames, named relative to it)
        inside = filename.rstrip(os.sep) + os.sep
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if f.filename == filename or f.filename.startswith(inside)]
        if frames:
            name = frames[-1].filename
            what = f"{name[len(inside):]} " if name.startswith(inside) else ""
            where = f" ({what}line {frames[-1].lineno}: {(frames[-1].line or '').strip()})"
        if isinstance(exc, SyntaxError) and exc.lineno is not None:
            name = exc.filename or ""
            what = f"{name[len(inside):]} " if name.startswith(inside) else ""
            where = f" ({what}line {exc.lineno}: {(exc.text or '').strip()})"
    elif isinstance(exc, SyntaxError) and exc.lineno is not None:
        where = f" (line {exc.lineno}: {(exc.text or '').strip()})"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"import failed: {type(exc).__name__}{': ' + message if message else ''}{where}"


def _guarded(ref_where: str, filename: str | None, body: Any) -> ModuleType:
    """Run ``body()`` (which imports and registers); on any failure undo its registrations."""
    from hierfl.config import registry

    saved = registry.snapshot()
    try:
        module = body()
        _check_api(module, ref_where)
        return module  # type: ignore[no-any-return]
    except PluginError:
        registry.restore(saved)
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever a user's file raises is reported, not a crash
        registry.restore(saved)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise PluginError(ref_where, _failure(exc, filename)) from None


def _exec_file(name: str, path: str, source: str) -> ModuleType:
    """Execute ``source`` (read from ``path``) as the module ``name`` (in ``sys.modules`` while it runs:
    dataclasses and pickling look their classes up there)."""
    spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    assert spec is not None  # noqa: S101 - spec_from_loader returns one for a plain name
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    sys.modules[name] = module
    try:
        exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - running the user's plug-in is the point
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _refresh_schema() -> None:
    """Rebuild the schemas that embed a registry a plug-in just added to (hierfl.config.late)."""
    from hierfl.config import late

    late.refresh()


def _load_file(path: Path) -> PluginRef:
    resolved = str(path.resolve())
    known = _SPECS.get(resolved)
    if known is not None and not path.exists():  # a trial that got it in its bundle: not on this node
        return known
    if not path.exists():
        raise PluginError(str(path), "file not found")
    if path.is_dir():
        if (path / "__init__.py").is_file():
            return _load_package(path)
        raise PluginError(str(path), "is a folder without __init__.py; give a .py file, a package folder (with "
                                     "__init__.py), or an installed module's name (pkg.module)")
    try:
        data = path.read_bytes()
        source = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PluginError(resolved, f"cannot read it: {exc}") from None
    sha = hashlib.sha256(data).hexdigest()
    if known is not None and known.sha256 == sha:  # the same file again (a second run, a sweep's trial)
        return known
    if known is not None:  # edited since it was loaded (a notebook): the new text replaces the old
        _forget(known)
    name = file_module_name(sha)
    if name in _LOADED:  # the same content under another path: one module, registered once
        ref = replace(_LOADED[name], spec=resolved, path=resolved)
    else:
        _guarded(resolved, resolved, lambda: _exec_file(name, resolved, source))
        ref = _LOADED[name] = PluginRef(resolved, "file", name, resolved, sha, source)
    _SPECS[resolved] = ref
    return ref


def _package_sources(folder: Path) -> dict[str, str]:
    """Every ``.py`` file of a package folder (sub-packages included, caches and hidden folders not), by its
    path relative to the folder, in a stable order."""
    out: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder)
        if any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
            continue
        try:
            out[rel.as_posix()] = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PluginError(str(path), f"cannot read it: {exc}") from None
    return out


def _package_hash(sources: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(sources):
        digest.update(rel.encode("utf-8") + b"\0" + sources[rel].encode("utf-8") + b"\0")
    return digest.hexdigest()


def _exec_package(name: str, folder: Path) -> ModuleType:
    """Import the package folder ``folder`` as the top-level module ``name`` (its sub-modules, relative or absolute
    imports of its own name, and pickles of its classes then resolve as for an installed package)."""
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None  # noqa: S101 - a file location with a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _drop_modules(name)
        raise
    return module


def _drop_modules(name: str) -> None:
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def _load_package(folder: Path) -> PluginRef:
    """A package folder plug-in: imported under the folder's own name, so its modules import each other as they
    would installed; its files' text travels to Ray workers (:func:`install_bundle`)."""
    resolved = str(folder.resolve())
    name = folder.resolve().name
    if not name.isidentifier():
        raise PluginError(resolved, f"a package folder's name is its module name, and {name!r} is not a valid one")
    sources = _package_sources(folder)
    sha = _package_hash(sources)
    known = _SPECS.get(resolved) or _LOADED.get(name)
    if known is not None and known.kind == "package" and known.sha256 == sha:
        _SPECS[resolved] = known
        return known
    if known is not None and known.kind == "package":  # edited since it was loaded: the new files replace the old
        _forget(known)
    elif name in sys.modules:
        where = getattr(sys.modules[name], "__file__", None) or "elsewhere"
        raise PluginError(resolved, f"a module named {name!r} is already imported (from {where}); rename the folder")
    ref = PluginRef(resolved, "package", name, resolved, sha, json.dumps(sources, sort_keys=True))
    _guarded(resolved, resolved, lambda: _exec_package(name, folder))
    _LOADED[name] = ref
    _SPECS[resolved] = ref
    return ref


def _materialise(ref: PluginRef) -> Path:
    """A package plug-in's files written out on this node (a Ray worker whose node may lack the folder): under the
    temporary directory, keyed by their hash, so the workers of a node share one copy."""
    root = Path(tempfile.gettempdir()) / "hierfl_plugins" / (ref.sha256 or "unknown")[:16]
    folder = root / ref.module
    if not (folder / "__init__.py").is_file():
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging_", dir=root))
        for rel, text in json.loads(ref.source or "{}").items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        try:
            os.replace(staging, folder)  # atomic: another worker of this node may be writing the same copy
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _forget(ref: PluginRef) -> None:
    """Unload a file or package plug-in whose files have changed: its registrations, its modules, the loader's
    record."""
    from hierfl.config import registry

    for mod in [m for m in sys.modules if m == ref.module or m.startswith(ref.module + ".")]:
        registry.forget_module(mod)
    _drop_modules(ref.module)
    _LOADED.pop(ref.module, None)
    for spec in [s for s, r in _SPECS.items() if r.module == ref.module]:
        del _SPECS[spec]


def _file_hash(path: str | None) -> str | None:
    if not path or not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _load_module(name: str) -> PluginRef:
    if name in _LOADED:
        return _LOADED[name]
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name):
        raise PluginError(name, "neither a .py file nor a module name (pkg.module)")

    def body() -> ModuleType:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                here = Path(*name.split("."))
                if (here / "__init__.py").is_file():  # a package folder given by its bare name
                    raise PluginError(name, f"no such module installed; the folder {here}{os.sep} is here: give "
                                            f"its path, ./{here.as_posix()}/") from None
                raise PluginError(name, "no such module (not installed, and not on the Python path); a file "
                                        "needs its path, e.g. ./my_method.py") from None
            raise

    module = _guarded(name, None, body)
    path = getattr(module, "__file__", None)
    ref = PluginRef(name, "module", name, path, _file_hash(path))
    _LOADED[name] = ref
    return ref


def load_plugin(spec: str, base_dir: str | Path | None = None) -> PluginRef:
    """Load one plug-in (a ``.py`` path, relative to ``base_dir`` or the working directory, or a module
    name); raises :class:`PluginError`. The scenario schema is refreshed when it registered something."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(repr(spec), "expected a file path or a module name")
    spec = spec.strip()
    if looks_like_path(spec):
        path = Path(os.path.expanduser(spec))
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        ref = _load_file(path)
    else:
        ref = _load_module(spec)
    _refresh_schema()
    return ref


def load_plugins(specs: Sequence[Any] | None, base_dir: str | Path | None = None, key: str = "plugins",
                 source: str | None = None) -> list[PluginRef]:
    """Load every plug-in of ``specs`` (and the installed entry points); every failure at once as a
    :class:`~hierfl.config.errors.ConfigError` whose problems are keyed ``key[i]`` (``plugins[0]``)."""
    problems = _entry_point_problems()
    refs: list[PluginRef] = []
    if specs is not None and (isinstance(specs, (str, bytes)) or not isinstance(specs, (list, tuple))):
        problems.append(Problem(key, "must be a list of plug-in files or module names", specs))
        specs = []
    for i, spec in enumerate(specs or []):
        if not isinstance(spec, str):
            problems.append(Problem(f"{key}[{i}]", "expected a file path or a module name", spec))
            continue
        try:
            refs.append(load_plugin(spec, base_dir))
        except PluginError as exc:
            problems.append(Problem(f"{key}[{i}]", f"{exc.spec}: {exc.reason}"))
    if problems:
        raise ConfigError(problems, source)
    return refs


def _entry_point_problems() -> list[Problem]:
    try:
        load_entry_points()
    except ConfigError as exc:
        return exc.problems
    return []


def load_entry_points() -> list[PluginRef]:
    """Load the plug-ins installed packages declare (group ``hierfl.plugins``), once per process.

    An entry point's object is a module (importing it registered its plug-ins) or a function,
    called once with no arguments. Failures raise a :class:`ConfigError` naming the entry point.
    """
    if _ENTRY_POINTS["loaded"]:
        return [r for r in _LOADED.values() if r.kind == "entry_point"]
    _ENTRY_POINTS["loaded"] = True
    from importlib.metadata import entry_points

    problems: list[Problem] = []
    refs: list[PluginRef] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        spec = f"{ep.name} = {ep.value}"
        if ep.module in _LOADED:
            continue

        def body(ep: Any = ep) -> ModuleType:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, ModuleType):
                obj()
            return sys.modules[ep.module]

        try:
            module = _guarded(spec, None, body)
        except PluginError as exc:
            problems.append(Problem(f"entry point {ENTRY_POINT_GROUP}: {exc.spec}", exc.reason))
            continue
        path = getattr(module, "__file__", None)
        ref = PluginRef(spec, "entry_point", ep.module, path, _file_hash(path))
        _LOADED[ep.module] = ref
        refs.append(ref)
    if refs:
        _refresh_schema()
    if problems:
        raise ConfigError(problems, "installed plug-ins")
    return refs


@contextmanager
def isolated() -> Iterator[None]:
    """Plug-ins loaded inside are forgotten on exit: their registrations, their modules, the loader's
    record of them (a test suite's plug-ins must not leak into the tests that follow)."""
    from hierfl.config import late, registry

    saved = registry.snapshot()
    loaded, specs, entry_points = dict(_LOADED), dict(_SPECS), dict(_ENTRY_POINTS)
    try:
        yield
    finally:
        for name in set(_LOADED) - set(loaded):
            _drop_modules(name)
        _LOADED.clear()
        _LOADED.update(loaded)
        _SPECS.clear()
        _SPECS.update(specs)
        _ENTRY_POINTS.update(entry_points)
        registry.restore(saved)
        late.refresh()


def refs_for(specs: Iterable[str]) -> list[PluginRef]:
    """The loaded plug-ins a scenario names (its resolved ``plugins:``), then the installed entry points."""
    by_spec = {**{ref.spec: ref for ref in _LOADED.values()}, **_SPECS}
    refs = [by_spec[s] for s in specs if s in by_spec]
    return refs + [ref for ref in _LOADED.values() if ref.kind == "entry_point" and ref not in refs]


def bundle() -> tuple[dict[str, Any], ...]:
    """What a Ray worker needs to load this process's plug-ins (:func:`install_bundle`): plain mappings."""
    aliases = [ref for spec, ref in _SPECS.items() if _LOADED.get(ref.module) != ref]
    return tuple(ref.as_dict() for ref in [*_LOADED.values(), *aliases])


def install_bundle(items: Iterable[dict[str, Any]]) -> None:
    """Load the plug-ins of a :func:`bundle` in this process (a Ray actor or a Tune trial), in their
    order, before anything of the run is unpickled. A file runs from the shipped text under the
    driver's module name (the file need not exist on this node); modules are imported by name."""
    refs = [PluginRef.from_dict(dict(item)) for item in items]
    if not refs:
        return
    for ref in refs:
        if ref.kind == "package":  # named after its folder, not its content: a long-lived worker may hold another
            have = _LOADED.get(ref.module)  # version of it (an edited package), which the new files replace
            if have is not None and have.sha256 == ref.sha256:
                _SPECS.setdefault(ref.spec, ref)
                continue
            if have is not None:
                _forget(have)
            elif ref.module in sys.modules:
                raise PluginError(ref.describe(), f"a module named {ref.module!r} is already imported in this worker")
        elif ref.module in _LOADED or ref.module in sys.modules:
            if ref.kind == "file":
                _SPECS.setdefault(ref.spec, ref)  # another path of a file already here
            continue
        if ref.kind == "file":
            if ref.source is None:
                raise PluginError(ref.describe(), "no source text in the bundle")
            _guarded(ref.describe(), ref.path, lambda r=ref: _exec_file(r.module, r.path or r.spec, r.source))
            _LOADED[ref.module] = ref
            _SPECS[ref.spec] = ref  # the driver's path stands for it here (the file may not exist on this node)
        elif ref.kind == "package":
            if ref.source is None:
                raise PluginError(ref.describe(), "no files in the bundle")
            folder = _materialise(ref)
            _guarded(ref.describe(), str(folder), lambda r=ref, f=folder: _exec_package(r.module, f))
            _LOADED[ref.module] = ref
            _SPECS[ref.spec] = ref
        elif ref.kind == "entry_point":
            load_entry_points()
        else:
            _load_module(ref.module)
    _refresh_schema()


def _changed_or_missing(ref: PluginRef, what: str) -> str | None:
    """Why the file or package folder ``what`` (a checkpoint) needs is not there as it was, or None."""
    package = ref.kind == "package"
    where, noun = Path(ref.path or ref.spec), "plug-in package" if package else "plug-in"
    present = (where / "__init__.py").is_file() if package else where.is_file()
    if not present:
        return (f"{what} needs the {noun} {ref.describe()} (module {ref.module}), which is missing: "
                f"{'folder' if package else 'file'} not found; give it with --plugin PATH")
    sha = _package_hash(_package_sources(where)) if package else _file_hash(str(where))
    if sha != ref.sha256:
        return (f"{what} needs the {noun} {ref.describe()} as it was (sha256 {ref.sha256}); "
                f"{'its files have' if package else 'the file has'} changed since, so the run could not continue "
                "with the same results")
    return None


def require(refs: Iterable[PluginRef], what: str) -> list[str]:
    """Load the plug-ins ``what`` (a checkpoint) was made with; returns the problems, one per plug-in
    that is missing or has changed (empty: all there, with the same content)."""
    problems: list[str] = []
    for ref in refs:
        if ref.module in _LOADED and (ref.sha256 is None or _LOADED[ref.module].sha256 == ref.sha256):
            continue
        if ref.kind in ("file", "package"):
            problem = _changed_or_missing(ref, what)
            if problem is not None:
                problems.append(problem)
                continue
        try:
            if ref.kind in ("file", "package"):
                load_plugin(str(ref.path))
            elif ref.kind == "entry_point":
                load_entry_points()
                if ref.module not in _LOADED:
                    raise PluginError(ref.spec, "no such entry point is installed any more")
            else:
                load_plugin(ref.module)
        except (PluginError, ConfigError) as exc:
            problems.append(f"{what} needs the plug-in {ref.describe()}, which cannot be loaded: {exc}")
            continue
        now = _LOADED.get(ref.module)
        if ref.kind != "file" and ref.sha256 is not None and now is not None and now.sha256 != ref.sha256:
            problems.append(f"{what} needs the plug-in {ref.describe()} as it was (sha256 {ref.sha256}); its "
                            f"module file {now.path} has changed since")
    return problems
