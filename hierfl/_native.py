"""The event path compiled with Cython (optional): the same Python source, compiled as it is.

The modules every event goes through (``HOT``: the engine, the flow network, dynamics, transfers,
the context, the run loop, the local executor, aggregation, telemetry and the trace) can be
compiled by Cython into C extensions (``hierfl native build``, run by ``make``). Nothing in the source changes: Cython compiles the
plain Python modules with Python's semantics kept (no annotation typing, no type inference,
``-ffp-contract=off``), so every output is bit-identical to the pure-Python run's
(``tests/runtime/test_native.py`` compares both in one session). About 15 % off the per-event
cost (``analysis/bench/scale.py`` prints both side by side).

A compiled module is used only if it was compiled from exactly the source file that is there now
(its sha256 is in the manifest) and for this interpreter (extension suffix): an edited module is
imported from its source until the next build, never from a stale extension. Everything else
(another machine of a cluster without the build, no C compiler) falls back to pure Python with
the same results. ``HIERFL_NATIVE=0`` turns it off (for profilers that read Python frames).

This module imports only the standard library: it is installed by ``hierfl/__init__.py`` before
any other hierfl module is imported.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["HOT", "NATIVE_DIR", "install", "status", "build", "clean"]

PACKAGE = Path(__file__).resolve().parent
NATIVE_DIR = PACKAGE / "_native"
MANIFEST = NATIVE_DIR / "manifest.json"
ENV = "HIERFL_NATIVE"

# the modules on the path of every event (the event loop's per-event profile): the core and the
# driver only; protocols, plug-ins and configs stay Python (pydantic models cannot be compiled)
HOT = (
    "hierfl.core.aggregate",
    "hierfl.core.dynamics",
    "hierfl.core.engine",
    "hierfl.core.network",
    "hierfl.core.timeseries",
    "hierfl.driver.aggregation",
    "hierfl.driver.context",
    "hierfl.driver.loop",
    "hierfl.driver.nonfinite",
    "hierfl.driver.tiers",
    "hierfl.driver.transfers",
    "hierfl.output.bounded",
    "hierfl.output.telemetry",
    "hierfl.output.trace",
    "hierfl.runtime.executor",
)

# Python's semantics, unchanged: annotations are not C types (an int passed as ``float`` stays an
# int), no inferred C types, Python functions (introspection, pickling of bound methods)
DIRECTIVES = {"language_level": 3, "binding": True, "annotation_typing": False, "infer_types": False,
              "always_allow_keywords": True, "embedsignature": False}
# no fused multiply-add across two Python float operations (a different rounding than CPython's)
CFLAGS = ["-ffp-contract=off", "-O2"]


def source_of(module: str) -> Path:
    """The ``.py`` file of a hierfl module."""
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _suffix() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the compiled extension of a hot module when it matches the source there now."""

    def __init__(self, manifest: dict[str, Any], directory: Path) -> None:
        self.modules: dict[str, dict[str, str]] = dict(manifest.get("modules", {}))
        self.directory = directory
        self.loaded: list[str] = []     # imported from their extension
        self.stale: list[str] = []      # an extension exists, but the source changed since the build

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        entry = self.modules.get(fullname)
        if entry is None:
            return None
        so = self.directory / entry["file"]
        try:
            fresh = _sha256(source_of(fullname)) == entry["sha256"]
        except OSError:
            fresh = False
        if not fresh or not so.is_file():
            self.stale.append(fullname)
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(so))
        spec = importlib.util.spec_from_file_location(fullname, str(so), loader=loader)
        if spec is not None:
            self.loaded.append(fullname)
        return spec


_finder: _Finder | None = None


def read_manifest(path: Path = MANIFEST) -> dict[str, Any] | None:
    """The build's manifest, or None when there is none (or it is unreadable)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` when a build for this interpreter is there.

    Called once by ``hierfl/__init__.py``; does nothing with ``HIERFL_NATIVE=0`` or without a
    usable build. It costs one small JSON read; a source is hashed only when its module is imported.
    """
    global _finder
    if _finder is not None or os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    manifest = read_manifest()
    if not manifest or manifest.get("suffix") != _suffix() or not manifest.get("modules"):
        return
    _finder = _Finder(manifest, NATIVE_DIR)
    sys.meta_path.insert(0, _finder)


def status() -> dict[str, Any]:
    """What this process uses: each hot module's origin (``compiled``, ``python``, ``stale`` or
    ``not imported``) and the build's details."""
    manifest = read_manifest() or {}
    modules: dict[str, str] = {}
    for name in HOT:
        mod = sys.modules.get(name)
        if mod is None:
            state = "not imported"
        elif str(getattr(mod, "__file__", "")).endswith(".py"):
            state = "stale" if _finder is not None and name in _finder.stale else "python"
        else:
            state = "compiled"
        modules[name] = state
    return {"enabled": _finder is not None, "disabled_by_env": os.environ.get(ENV, "1").strip().lower()
            in ("0", "false", "no", "off"), "built": sorted(manifest.get("modules", {})),
            "error": manifest.get("error"), "cython": manifest.get("cython"), "modules": modules}


def compiled() -> list[str]:
    """The hot modules this process imported from their compiled extension."""
    return [name for name, state in status()["modules"].items() if state == "compiled"]


def clean() -> None:
    """Remove the build (every hot module is then imported from its source)."""
    import shutil

    shutil.rmtree(NATIVE_DIR, ignore_errors=True)


def build(jobs: int = 2, quiet: bool = False, directory: Path = NATIVE_DIR) -> dict[str, Any]:
    """Compile :data:`HOT` with Cython into ``directory`` and write its manifest; returns the manifest.

    A failure (no Cython, no C compiler) is written to the manifest as ``error`` with no module, so
    nothing stale is used and ``make`` does not retry it on every call; it is then raised.
    """
    import shutil
    import tempfile

    directory.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"suffix": _suffix(), "python": sys.version.split()[0], "modules": {}}
    try:
        import Cython
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
        from setuptools.command.build_ext import build_ext

        manifest["cython"] = Cython.__version__
        # the sources' hashes before compiling: a file edited during the build is stale, not used
        hashes = {name: _sha256(source_of(name)) for name in HOT}
        with tempfile.TemporaryDirectory(prefix="hierfl-native-") as tmp:
            exts = [Extension(name, [str(source_of(name))], extra_compile_args=CFLAGS) for name in HOT]
            exts = cythonize(exts, build_dir=str(Path(tmp) / "c"), compiler_directives=DIRECTIVES,
                             nthreads=max(1, jobs), quiet=quiet, force=True)
            dist = Distribution({"name": "hierfl-native", "ext_modules": exts})
            cmd = build_ext(dist)
            cmd.build_lib = str(Path(tmp) / "lib")
            cmd.build_temp = str(Path(tmp) / "obj")
            cmd.parallel = max(1, jobs)
            cmd.ensure_finalized()
            if quiet:
                import logging

                logging.getLogger("setuptools").setLevel(logging.WARNING)
            cmd.run()
            for name in HOT:
                built = Path(cmd.get_ext_fullpath(name))
                target = directory / f"{name}{_suffix()}"
                # a new file, renamed over the old one: a running process keeps its mapped copy intact
                tmp_target = target.with_name(target.name + ".tmp")
                shutil.copyfile(built, tmp_target)
                os.replace(tmp_target, target)
                manifest["modules"][name] = {"file": target.name, "sha256": hashes[name]}
    except BaseException as exc:
        manifest["modules"] = {}
        manifest["error"] = f"{type(exc).__name__}: {exc}"
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        raise
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
