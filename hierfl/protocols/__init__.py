"""Protocols, registered by the name used in YAML (``protocol.name``)."""

from hierfl.protocols.ahfl import AHFL, AHFLConfig
from hierfl.protocols.base import PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.fedasync import FedAsync, FedAsyncConfig
from hierfl.protocols.fedavg import FedAvg, FedAvgConfig
from hierfl.protocols.fedbuff import FedBuff, FedBuffConfig
from hierfl.protocols.fedch import FedCH, FedCHConfig
from hierfl.protocols.fedhisyn import FedHiSyn, FedHiSynConfig
from hierfl.protocols.hierfavg import HierFAVG, HierFAVGConfig

__all__ = ["PROTOCOLS", "Protocol", "ProtocolConfig", "FedAvg", "FedAvgConfig", "FedHiSyn", "FedHiSynConfig",
           "HierFAVG", "HierFAVGConfig", "AHFL", "AHFLConfig", "FedAsync", "FedAsyncConfig", "FedBuff", "FedBuffConfig",
           "FedCH", "FedCHConfig"]
