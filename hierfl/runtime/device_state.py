"""Persistent per-device state in a device host: named vectors per device (:class:`~hierfl.core.method.StateStore`).

A job method that keeps state on its devices (:attr:`JobMethod.keeps_device_state
<hierfl.core.method.JobMethod.keeps_device_state>`) reads and writes it by device and name; the host
checkpoints it, reports its memory and forgets a device's state on request.
"""

from hierfl.core.method import StateStore as DeviceState

__all__ = ["DeviceState"]
