"""``robustness:`` — what the run does with a non-finite (NaN or Inf) update (reliability).

One NaN from one device makes every later global model NaN under every protocol, so every
device update is checked before it is aggregated, at whatever tier it arrives (the driver's
aggregation entry points), and the global model at every evaluation:

* ``on_nonfinite: fail`` (default): the run stops with status ``diverged``; the error names the
  device, its job and the virtual time;
* ``on_nonfinite: drop``: the update is left out of its aggregation as if it never arrived,
  counted in ``totals.nonfinite_dropped`` and reported by a ``nonfinite_update`` metric line.

A non-finite global model (e.g. a server optimizer that overflowed) always ends the run with
status ``diverged``, and its evaluation reports no accuracy (it can never reach a target).

This module is the section's schema; the driver's side is :mod:`hierfl.driver.nonfinite`. The YAML
key keeps its name ``robustness`` (scenario files use it); Byzantine robustness — aggregation
rules, attacks and ``summary.json``'s ``robustness`` block — is another feature, in
:mod:`hierfl.robust`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hierfl.config.base import ConfigModel

__all__ = ["NonFiniteConfig"]


class NonFiniteConfig(ConfigModel):
    """Handling of non-finite updates (a section of its own: robust aggregation rules are ``aggregation:``)."""

    on_nonfinite: Literal["fail", "drop"] = Field(
        default="fail", description="a NaN/Inf update: fail = stop the run (status diverged); "
                                    "drop = leave it out of its aggregation and count it")
