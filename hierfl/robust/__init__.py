"""Byzantine robustness: robust aggregation rules, Byzantine devices and compromised edge servers.

A run may replace the weighted mean of a synchronous aggregation by a robust rule (``aggregation:
{edge: …, cloud: …}``: geometric or coordinate-wise medians, trimmed mean, Krum, Zeno, norm
clipping, …), make devices Byzantine from a virtual time on (the ``attack`` event kind) and let
compromised edge servers tamper with their aggregate (``aggregation.edge_behavior``). A behaviour
changes what is sent, never when: the timing of a run is the same with and without an attack.
How-to: docs/howto/byzantine.md; sources: :mod:`hierfl.robust.math`.

One module per layer role; each obeys the rules of its role's layer (tests/interface/test_layers.py):

========================  ===========  ==============================================================
module                    layer        holds
========================  ===========  ==============================================================
``math.py``               core         the rules and transforms on the rows of one aggregation (numpy only)
``rules.py``              learn        the aggregation rules as plug-ins (``AGGREGATION_RULES``)
``behaviours.py``         learn        the device behaviours as plug-ins (``BEHAVIORS``)
``config.py``             scenario     the ``aggregation:`` section and
                                       :class:`~hierfl.robust.config.RobustSetup`, what the roles receive
``events.py``             dynamics     the ``attack`` event kind (registered by :mod:`hierfl.dynamics`)
``driver.py``             driver       who is Byzantine when, the tags that travel with updates, the
                                       roles' reports turned into records and ``summary.json``'s
                                       ``robustness`` block
========================  ===========  ==============================================================

Where it is wired in elsewhere: the aggregating roles apply the rule at each commit
(:class:`hierfl.runtime.roles.Aggregation`, the executors' ``robust_*`` calls) and the driver's
tier stack puts the rule's layer in place (``hierfl/driver/tiers.py``). Non-finite updates
(``robustness.on_nonfinite``) are another feature, a guard of every run: ``hierfl/scenario/nonfinite.py``
and ``hierfl/driver/nonfinite.py``.

This file imports nothing, so :mod:`hierfl.robust.math` can be imported without pydantic.
"""
