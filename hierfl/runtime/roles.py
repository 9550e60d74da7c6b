"""Role logic as plain classes: device hosts, leaders and the cloud.

Actors are thin: :mod:`hierfl.runtime.ray_actors` applies ``ray.remote`` to these classes in
one place, and :class:`~hierfl.runtime.executor.LocalExecutor` calls them directly. Parameters
are one contiguous float32 vector per model; aggregation is vector arithmetic.

The roles live in one module each: :mod:`hierfl.runtime.device_host` (device hosts),
:mod:`hierfl.runtime.server_roles` (leaders, the cloud, server work), :mod:`hierfl.runtime.aggregation_role`
(one aggregator's running state) and :mod:`hierfl.runtime.role_common` (what they share). This module
gathers them under one name, the one the executors and tests import.
"""

from hierfl.runtime.aggregation_role import Aggregation, robust_step
from hierfl.runtime.device_host import DeviceHost, group_trainers
from hierfl.runtime.role_common import (NONFINITE, ModelSpec, average_rows, combine_packed, cpu_batching_of,
                                        delta_packed, device_of, fast_path_of, flag_nonfinite, group_max_of,
                                        models_of, precision_of)
from hierfl.runtime.server_roles import Cloud, LeaderHost, ServerWork

__all__ = ["DeviceHost", "LeaderHost", "Cloud", "ModelSpec", "Aggregation", "average_rows", "combine_packed",
           "delta_packed", "device_of", "fast_path_of", "models_of", "precision_of", "cpu_batching_of", "group_max_of", "NONFINITE",
           "flag_nonfinite", "robust_step", "group_trainers", "ServerWork"]
