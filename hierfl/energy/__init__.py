"""Device energy: the joules of each device's training jobs, its other timed work (crypto, channel coding, DP)
and its model transfers (``energy:``).

Off unless the scenario has an ``energy:`` section; with it the driver charges every finished
training job (J per FLOP of the device's tier) and every model transfer (a per-bit and
time-on-air radio model of the tier's link type) and writes per-device joules and totals.
Formulas, defaults and sources: :mod:`hierfl.energy.math`, docs/explanation/energy.md.

One module per layer role; each obeys the rules of its role's layer (tests/interface/test_layers.py):

==============  ===========  =========================================================================
module          layer        holds
==============  ===========  =========================================================================
``math.py``     core         the formulas, the documented defaults and the run's
                             :class:`~hierfl.energy.math.EnergyLedger` (numpy only)
``config.py``   scenario     the ``energy:`` section of the scenario schema
``driver.py``   driver       the ledger of a run, built from the scenario and the world
==============  ===========  =========================================================================

Where it is wired in elsewhere: the driver charges the ledger where it already counts work —
finished jobs in the job pipeline (``hierfl/driver/jobs.py``), transfers in
``hierfl/driver/transfers.py`` — and the run's summary and ``devices.csv`` take its part.

This file imports nothing, so :mod:`hierfl.energy.math` can be imported without pydantic.
"""
