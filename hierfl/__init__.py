"""hierfl — an asynchronous hierarchical edge-computing emulator for federated learning.

Virtual time is the only clock; a run is a pure function of (scenario, seed).
See ``docs`` in the README and ARCHITECTURE.md for the design.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
