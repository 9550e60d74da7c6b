"""Protocols, registered by the name used in YAML (``protocol.name``): the framework they are written on.

This package holds what every protocol shares: the base classes and the registry (:mod:`.base`), the
straggler barrier (:mod:`.straggler`), re-grouping (:mod:`.regroup`), locked pairwise exchanges
(:mod:`.pairwise`) and the chain ledger (:mod:`.ledger`). The shipped protocols live in their methods'
packages (``hierfl/methods/<method>/protocol.py``, :mod:`hierfl.methods`), each config class registering
itself with ``@PROTOCOLS.register``; importing this package imports them all, so that the registry is
complete whichever module a caller imports first.
"""

import importlib
import pkgutil

from hierfl.protocols.base import PROTOCOLS, Protocol, ProtocolConfig

for _module in pkgutil.iter_modules(__path__):  # plug-ins added as new files register on import
    importlib.import_module(f"{__name__}.{_module.name}")

# last: a method's protocol imports this package's modules (here complete) while it registers
import hierfl.methods  # noqa: E402, F401  (every shipped method registers its protocol)

__all__ = ["PROTOCOLS", "Protocol", "ProtocolConfig"]
