"""Network topologies: files (YAML, GraphML), generators, and their realisation for N devices.

``topology.file`` and ``topology.generator`` in a scenario become a :class:`TopologySpec`
(edge servers, composed edge ↔ cloud links, shared capacities, device attachment rule);
:mod:`hierfl.topology.realize` turns it into the arrays of the emulated world.
"""

from hierfl.topology.fileformat import TopologyFile, TopologyFileError
from hierfl.topology.generators import GENERATORS, GeneratorConfig
from hierfl.topology.loader import load_topology_file
from hierfl.topology.realize import TopologyError, attach, check_devices, layout, world_fields
from hierfl.topology.spec import EdgeServer, RegionRule, TopologySpec

__all__ = ["TopologyFile", "TopologyFileError", "load_topology_file", "GENERATORS", "GeneratorConfig",
           "TopologyError", "attach", "check_devices", "layout", "world_fields", "EdgeServer", "RegionRule",
           "TopologySpec"]
