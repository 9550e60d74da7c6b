"""DisTrans as data: the offset a device keeps and how it is trained (pure, no torch).

Yuan, Hui, Yang, Burlina, Gong, Cao, "Addressing Heterogeneity in Federated Learning via
Distributional Transformation", ECCV 2022 (arXiv 2210.15025). Every device learns an input-shaped
offset ``t_i``; a dual-input model (:class:`hierfl.models.nets.DualInput`) sees each sample as
``x_L = (1 − a)x + a·t_i`` and ``x_R = (1 + a)x − a·t_i``; the offset is trained with the model and
stays on the device (the authors' non-IID default), and the device is evaluated with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar
from collections.abc import Callable

import numpy as np

from hierfl.core.method import JobMethod

__all__ = ["OFFSET_MODES", "OFFSET_UPDATES", "OffsetSpec", "initial_offset", "mean_initial_offset"]

OFFSET_MODES = ("local", "mean")
OFFSET_UPDATES = ("joint", "alternating")


@dataclass(frozen=True)
class OffsetSpec(JobMethod):
    """What a DisTrans job does with its device's offset.

    ``mode``: ``local`` (never aggregated) or ``mean`` (the offset travels behind the model, the servers
    average it with the model, every device starts each job from the average); ``lr_offset``: plain SGD rate of the offset; ``update``:
    ``joint`` (model and offset step from the same gradient, the authors' code) or ``alternating``
    (a model step, then an offset step from the moved model's gradient on the same batch);
    ``init_seed``: seeds each device's initial offset (set from the scenario seed by the build).
    """

    mode: str = "local"
    lr_offset: float = 1e-3
    update: str = "joint"
    init_seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in OFFSET_MODES:
            raise ValueError(f"OffsetSpec: mode must be one of {OFFSET_MODES}, got {self.mode!r}")
        if self.update not in OFFSET_UPDATES:
            raise ValueError(f"OffsetSpec: update must be one of {OFFSET_UPDATES}, got {self.update!r}")
        if not (math.isfinite(self.lr_offset) and self.lr_offset >= 0):
            raise ValueError(f"OffsetSpec: lr_offset must be a finite number >= 0, got {self.lr_offset!r}")

    # -- as a job method (hierfl.core.method): the offset is per-device state of the device's host -------
    keeps_device_state: ClassVar[bool] = True
    state_names: ClassVar[tuple[str, ...]] = ("offset",)
    device_evaluation: ClassVar[bool] = True  # a device is tested through its own offset

    def result_width(self, num_params: int, num_classes: int, input_size: int) -> int:
        """The model, followed by the trained offset with ``mode: mean``."""
        return num_params + (input_size if self.shared else 0)

    def with_run_seed(self, seed_of: Callable[[str], int]) -> OffsetSpec:
        """Each device's first offset is a function of the scenario seed (stream ``offset_init``)."""
        return replace(self, init_seed=seed_of("offset_init"))

    def initial_extra(self, input_size: int, num_devices: int) -> np.ndarray | None:
        """With ``mode: mean`` the run's vector is ``[model; shared offset]``, starting from the devices' mean."""
        return mean_initial_offset(input_size, self.init_seed, num_devices) if self.shared else None

    @property
    def shared(self) -> bool:
        """Whether the offset travels with the model and is averaged (``mean``)."""
        return self.mode == "mean"

    @property
    def passes(self) -> int:
        """Forward+backward passes per batch: 2 when the offset takes its own step after the model's."""
        return 2 if self.update == "alternating" else 1


def initial_offset(size: int, seed: int, device: int) -> np.ndarray:
    """A device's first offset, float32 of ``size``: ``u ~ U[0, 1)`` per value from the generator seeded
    ``(seed, device)``, standardised as ``(u − 1/2)·√12`` (zero mean, unit variance: the scale of the
    standardised inputs; the authors draw ``U[0, 1)`` images and normalise them like their data)."""
    if size < 1:
        raise ValueError(f"an offset needs at least one value, got size {size}")
    u = np.random.default_rng([int(seed), int(device)]).random(int(size))
    return ((u - 0.5) * math.sqrt(12.0)).astype(np.float32)


def mean_initial_offset(size: int, seed: int, devices: int) -> np.ndarray:
    """``offset_mode: mean``'s first shared offset: the mean of the devices' :func:`initial_offset`, summed in
    device order in float64 (the server's first average of the offsets its devices would start from)."""
    if devices < 1:
        raise ValueError(f"need at least one device, got {devices}")
    acc = np.zeros(int(size), dtype=np.float64)
    for d in range(int(devices)):
        acc += initial_offset(size, seed, d)
    return (acc / devices).astype(np.float32)
