"""Protocols, registered by the name used in YAML (``protocol.name``).

Every module of this package is imported here, so a new protocol is one new file: its config
class registers itself with ``@PROTOCOLS.register`` (see :mod:`hierfl.protocols.fedavg`).
"""

import importlib
import pkgutil

from hierfl.protocols.ahfl import AHFL, AHFLConfig
from hierfl.protocols.base import PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.fedasync import FedAsync, FedAsyncConfig
from hierfl.protocols.fedavg import FedAvg, FedAvgConfig
from hierfl.protocols.fedbuff import FedBuff, FedBuffConfig
from hierfl.protocols.fedch import FedCH, FedCHConfig
from hierfl.protocols.fedhisyn import FedHiSyn, FedHiSynConfig
from hierfl.protocols.hierfavg import HierFAVG, HierFAVGConfig

for _module in pkgutil.iter_modules(__path__):  # plug-ins added as new files register on import
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["PROTOCOLS", "Protocol", "ProtocolConfig", "FedAvg", "FedAvgConfig", "FedHiSyn", "FedHiSynConfig",
           "HierFAVG", "HierFAVGConfig", "AHFL", "AHFLConfig", "FedAsync", "FedAsyncConfig", "FedBuff", "FedBuffConfig",
           "FedCH", "FedCHConfig"]
