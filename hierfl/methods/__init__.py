"""The shipped methods, one package each, written against the public plug-in API (:mod:`hierfl.plugin`).

Importing this package imports every method package in it, which registers what each method adds
(its protocol, its trainer config, its job runner). A method package is
laid out by layer role: ``math.py`` (numpy only: its rules and its job settings), ``config.py`` (its
``training.trainer`` config), ``job.py`` (the device job's runner), ``trainer.py`` (its torch work,
imported where it runs), ``protocol.py``, ``server.py`` (its server tasks: imported, and so
registered, the first time a server task is looked up, :func:`hierfl.learn.server_tasks.discover`,
so that loading a scenario imports no torch).
"""

import importlib
import pkgutil

# the server optimizer of a tier the scenario leaves unset (``server_optimizer.cloud`` / ``.edge``): server SGD
# with η = 1, i.e. plain averaging (hierfl.methods.fedopt)
DEFAULT_SERVER_OPTIMIZER = "fedavg"
# the protocol a trainer or a straggler policy runs under in the plug-in conformance suite
# (hierfl.plugin.testing): synchronous rounds over every device
HOST_PROTOCOL: dict[str, object] = {"name": "fedavg", "fraction": 1.0}

for _module in pkgutil.iter_modules(__path__):  # a new method package registers on import
    importlib.import_module(f"{__name__}.{_module.name}")

# a method package may register into a registry whose union an already-built section holds (a sub-protocol
# into subprotocol.cloud / .edge): rebuild those sections with the new names
from hierfl.config import late as _late  # noqa: E402

_late.refresh()
