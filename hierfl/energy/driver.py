"""The run's device-energy ledger (``energy:``), built from the scenario and the world.

Each device gets its tier's J/FLOP and its link type's radio power (the tier's ``link`` in
hierfl/profiles/tiers.yaml, ``energy.tier_links`` overriding it, ``energy.device_link`` for
devices drawn without a tier). The driver charges the ledger where it already counts work:
finished jobs in :meth:`Context.finish_training` (beside ``compute_s``) and transfers when they
arrive or are cut off in :class:`~hierfl.driver.transfers.Transfers` (beside the ``bytes_*``
counters), and a device's other work — a sub-protocol's crypto (:mod:`hierfl.subprotocol.driver`), a
transfer channel's encoding and decoding and privacy.dp's clipping and noise (in
:class:`~hierfl.driver.transfers.Transfers`) — at the device's active power. Formulas: :mod:`hierfl.energy.math`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.devices import shipped_tiers
from hierfl.energy.math import EnergyLedger

__all__ = ["energy_ledger"]


def energy_ledger(scenario: Any, built: Any, counters: dict[str, float]) -> EnergyLedger | None:
    """The ledger of a run with ``energy:`` (None without: nothing is charged, nothing written)."""
    cfg = scenario.energy
    if cfg is None:
        return None
    from hierfl.learn.local import forward_flops

    world = built.world
    specs = {**shipped_tiers(), **scenario.devices.custom_tiers}
    radios = cfg.radios()
    tiers = [str(t) for t in world.tier]
    per_flop: dict[str, float] = {}
    links: dict[str, str] = {}
    for t in sorted(set(tiers)):
        value = cfg.tier_j_per_flop(t)
        if value is None:  # the load-time checks reject this; a tier without one would charge nothing
            raise ValueError(f"energy.j_per_flop.{t}: no J/FLOP for this tier")
        per_flop[t] = value
        spec = specs.get(t)
        links[t] = cfg.tier_links.get(t) or (spec.link if spec is not None else None) or cfg.device_link
    shape, classes = tuple(built.dataset.input_shape), built.dataset.num_classes
    models = built.models
    if models is not None and models.heterogeneous:  # each device pays its own model's FLOPs
        fwd: float | np.ndarray = models.forward_flops(lambda fn, *args: fn(*args), shape, classes)
    else:
        fwd = forward_flops(scenario.model, shape, classes)
    return EnergyLedger(np.array([per_flop[t] for t in tiers]), [radios[links[t]] for t in tiers], fwd, counters,
                        np.asarray(world.speed_sps, dtype=np.float64))
