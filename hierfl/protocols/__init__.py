"""Protocols, registered by the name used in YAML (``protocol.name``)."""

from hierfl.protocols.base import PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.fedavg import FedAvg, FedAvgConfig
from hierfl.protocols.fedhisyn import FedHiSyn, FedHiSynConfig
from hierfl.protocols.hierfavg import HierFAVG, HierFAVGConfig

__all__ = ["PROTOCOLS", "Protocol", "ProtocolConfig", "FedAvg", "FedAvgConfig", "FedHiSyn", "FedHiSynConfig",
           "HierFAVG", "HierFAVGConfig"]
