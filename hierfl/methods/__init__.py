"""The shipped methods, one package each, written against the public plug-in API (:mod:`hierfl.plugin`).

Importing this package imports every method package in it, which registers what each method adds
(its job runners today; its protocol, trainer and server parts as they move here). A method package
is laid out by layer role: ``math.py`` (numpy only), ``config.py``, ``job.py`` (the device job's
runner, with torch), ``protocol.py``, ``server.py``.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):  # a new method package registers on import
    importlib.import_module(f"{__name__}.{_module.name}")
