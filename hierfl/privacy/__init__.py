"""Differential privacy: DP-FedAvg with central or local Gaussian noise, adaptive clipping, and accounting.

``privacy: {dp: {mode: central|local, noise_multiplier: z, clip: S, adaptive: {...}, accountant: ..., delta: ...}}``
turns the cloud's aggregation (a synchronous round, or a buffered asynchronous server step) into DP-FedAvg (McMahan, Ramage, Talwar, Zhang, "Learning
Differentially Private Recurrent Language Models", ICLR 2018): each update ``Δ_i = θ_i − θ`` is clipped to
L2 norm ``S``, the clipped updates are summed with weight 1 each, Gaussian noise is added (once to the sum,
``central``; or by every device to its own update, ``local``) and the sum is divided by the *expected*
cohort size ``C`` (the fixed-denominator estimator). The clip norm may follow the quantile-based rule of
Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive Clipping", NeurIPS
2021. The privacy spent is accounted with ``dp-accounting`` 0.6.0 for the sampling the run really does, and
reported as ε at the stated δ in every evaluation line and in ``summary.json``; ``stop.epsilon`` ends a
run at its budget. How-to: docs/howto/differential-privacy.md.

One module per layer role; each obeys the rules of its role's layer (tests/interface/test_layers.py):

========================  ===========  ==============================================================
module                    layer        holds
========================  ===========  ==============================================================
``math.py``               core         clipping, the noised sum, the adaptive clip step, the noise split
``rules.py``              learn        the DP aggregation the cloud's (or an edge server's) role runs (a stateful rule)
``server.py``             learn        ``dp_local``: a device's own clipped, noised upload (updates applied one by one)
``config.py``             scenario     the ``privacy:`` section and its load-time checks
``driver.py``             driver       the accountant: ε per evaluation, the ε budget, the summary block
``config_dp_sgd.py``      scenario     ``privacy.dp_sgd`` (sample-level DP-SGD) and its load-time checks
``driver_dp_sgd.py``      driver       DP-SGD's per-device accountant: ε per device, in eval lines and devices.csv
========================  ===========  ==============================================================

Where it is wired in elsewhere: the aggregating role runs the rule with a seeded generator and kept state
(:class:`hierfl.core.aggregate.RuleContext`, :class:`hierfl.runtime.aggregation_role.Aggregation`), the
driver puts the rule in place of the cloud's mean, or of the edge servers' with ``tier: edge``
(``hierfl/driver/opening.py``, ``hierfl/driver/context.py``); under Poisson sampling (``protocol.sampling:
bernoulli``) the rule releases on an empty round too (``Aggregator.releases_empty``: the noise alone); with a
protocol that applies updates one by one (asynchronous), local mode runs ``dp_local`` on each upload as it leaves
its device (``ChannelLinks.transform``).

``privacy.dp_sgd`` (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016) clips and noises every
example's gradient inside the devices' local training instead: :mod:`hierfl.learn.dp_sgd` (both training paths),
reached through :attr:`hierfl.core.work.TrainSpec.dp_sgd`; the driver's jobs service tells the per-device
accountant of every job a device starts.

This file imports nothing, so :mod:`hierfl.privacy.math` can be imported without pydantic.
"""
