"""hierfl — an asynchronous hierarchical edge-computing emulator for federated learning.

Virtual time is the only clock; a run is a pure function of (scenario, seed).
See docs/explanation/architecture.md for the design.

The Python API (:mod:`hierfl.api`) is imported on first use, so ``import hierfl`` stays cheap:
``hierfl.run(...)``, ``hierfl.load_run(dir)``, ``hierfl.sweep(...)``, ``hierfl.load_sweep(dir)``.
``hierfl.run`` uses the scenario's executor (Ray unless it says otherwise); ``executor="local"``
runs in this process with the same results.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "run", "load_run", "sweep", "load_sweep", "RunResultFrames"]

_API = {"run", "load_run", "sweep", "load_sweep", "RunResultFrames"}


def __dir__() -> list[str]:
    # the lazy API names are listed too, so dir(hierfl) and tab completion show them
    return sorted(set(globals()) | _API)


def __getattr__(name: str) -> Any:
    # lazily: the API pulls in pandas and the driver, which `hierfl --version` and the layers never need
    if name in _API:
        from hierfl import api

        return getattr(api, name)
    raise AttributeError(f"module 'hierfl' has no attribute {name!r}")
