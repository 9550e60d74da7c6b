"""Device traces: FedScale's capacity and availability files and our CSV formats, and their mapping to devices."""

from hierfl.traces.config import (
    CapacityTraceConfig,
    TraceFileConfig,
    availability_for_devices,
    device_capacities,
    map_clients,
)
from hierfl.traces.formats import (
    Availability,
    Capacity,
    TraceError,
    load_availability,
    load_capacity,
    write_availability_csv,
    write_availability_fedscale,
    write_capacity_csv,
    write_capacity_fedscale,
)

__all__ = ["CapacityTraceConfig", "TraceFileConfig", "availability_for_devices",
           "device_capacities", "map_clients", "Availability", "Capacity", "TraceError", "load_availability",
           "load_capacity", "write_availability_csv", "write_availability_fedscale", "write_capacity_csv",
           "write_capacity_fedscale"]
