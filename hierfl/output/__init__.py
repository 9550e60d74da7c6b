"""The output files of a run: one writer per file, the only place a record or trace event is formed."""

from hierfl.output.files import (CONTRACT_FILES, ClustersWriter, MetricsWriter, write_config, write_devices,
                                 write_model, write_summary)
from hierfl.output.telemetry import COUNTERS, RunTelemetry
from hierfl.output.trace import LANES, TraceWriter

__all__ = ["CONTRACT_FILES", "COUNTERS", "LANES", "ClustersWriter", "MetricsWriter", "RunTelemetry", "TraceWriter",
           "write_config", "write_devices", "write_model", "write_summary"]
