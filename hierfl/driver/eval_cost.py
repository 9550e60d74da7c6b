"""What per-device evaluation costs the devices in virtual time (``evaluation.device_eval_cost``).

Personalisation: "evaluation of many devices ... costs virtual time only if the scenario says so". With
``device_eval_cost: free`` (the default) nothing here exists and evaluation takes no virtual time.
With ``forward``, at every evaluation instant ``t`` each device ``d`` of the world that holds out
``m_d`` local test rows (``data.local_test_fraction``) is busy evaluating for

    eval_s_d = m_d / (3 · speed_sps_d)        (integrated over its slowdown windows)

``speed_sps`` is the device's training throughput (samples per second of forward + backward);
one forward pass is taken as a third of that, the usual estimate (backward ≈ 2 × forward, e.g.
Kaplan et al., "Scaling Laws for Neural Language Models", 2020: 2N FLOPs per sample forward,
6N for training). The evaluation starts at ``max(t, end of the device's current job, end of its
previous evaluation)`` — a device does one thing at a time — and a training job that would start
while the device is still evaluating waits for it: its duration (what the protocol sees in
``train_done`` and in ``planned_compute_s``) includes the wait. Only the forward pass is charged:
a personalised method's adaptation step before testing (meta-learned initialisations) and held-out test
devices (``data.test_devices``, not part of the world) cost nothing. Busy seconds are summed in
the ``device_eval_s`` counter and drawn as ``evaluate`` spans on the device lanes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.dynamics import finish_time

__all__ = ["FORWARD_SHARE", "DeviceEvalCost"]

FORWARD_SHARE = 1.0 / 3.0
"""A forward pass's share of one training sample's compute time (backward ≈ 2 × forward)."""


class DeviceEvalCost:
    """Per device: when its evaluations and its current job end (pickled with the driver's state)."""

    def __init__(self, speed_sps: np.ndarray, eval_sets: list[tuple[int, Any, Any]], counters: dict[str, float]) -> None:
        n = int(speed_sps.shape[0])
        # device → nominal seconds of one evaluation (world devices with local test rows only)
        self.eval_s = {int(d): float(len(test)) * FORWARD_SHARE / float(speed_sps[d])
                       for d, _, test in eval_sets if test is not None and int(d) < n and len(test)}
        self.busy_until = np.zeros(n)  # end of the device's last evaluation
        self.job_end = np.zeros(n)     # end (or loss) of the device's last training job
        self.waits: dict[tuple[int, int], float] = {}  # (device, job) → its wait, until the job is collected
        counters["device_eval_s"] = 0.0  # only runs that charge evaluation carry this total

    def wait(self, device: int, now: float) -> float:
        """Seconds a job starting now on ``device`` waits for its evaluation to finish."""
        return max(float(self.busy_until[device]) - now, 0.0)

    def job_started(self, device: int, job: int, now: float, end: float) -> float:
        """Job ``job`` of ``device`` starts now and ends (or is lost) at ``end``; its next evaluation queues
        behind it. Returns when its compute begins (after the device's evaluation)."""
        wait = self.wait(device, now)
        if wait > 0:
            self.waits[(device, job)] = wait
        self.job_end[device] = max(float(self.job_end[device]), end)
        return now + wait

    def waited(self, device: int, job: int) -> float:
        """Seconds job ``job`` of ``device`` waited for an evaluation (once: the job is collected)."""
        return self.waits.pop((device, job), 0.0)

    def charge(self, now: float, windows: list[list[Any]], telemetry: Any) -> None:
        """Every evaluated device is busy for its forward pass from when it is free, at ``now`` or later."""
        for d, work in self.eval_s.items():
            start = max(now, float(self.job_end[d]), float(self.busy_until[d]))
            end = finish_time(start, work, windows[d])
            self.busy_until[d] = end
            telemetry.counters["device_eval_s"] += end - start
            telemetry.span(("device", d), "evaluate", start, end - start)
