"""``channel``: a model message through a transfer channel, as its receiver gets it (``channels:``).

The driver charges the message's bytes and its encode and decode time itself (:mod:`hierfl.channels.driver`);
this task computes the value: ``decode(encode(x))`` of the channel named in ``params`` (its settings as in the
scenario), with the sender's kept state (``ctx.state`` of the point ``("channel:<direction>", sender)``, saved
in checkpoints with the roles' state) for a channel that keeps state. It charges no work here (0 FLOPs): the
driver has charged it on the sender's and the receiver's clocks.

With a second input (a channel with ``applies_to: update``), that input is the reference model both ends hold:
the channel encodes ``x − reference`` and the receiver gets ``reference + decode(…)``. ``params["reset"]``
clears the sender's kept state first (``reset_on_migration``: its messages now go to another receiver). A
channel that measures its bytes (``exact_bytes``) has its message's length reported in the stats (``bytes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.learn.server_tasks import ServerContext, ServerResult, server_task

__all__ = ["channel"]


def _example(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    x = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    return [x], {"channel": {"name": "fp16"}, "elements": 8}


@server_task("channel", example=_example)
def channel(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
            rng: np.random.Generator) -> ServerResult:
    """``inputs[0]`` encoded and decoded by ``params["channel"]`` (a channel's config); output: the decoded vector."""
    from hierfl.channels.rules import CHANNELS  # noqa: PLC0415 (a plug-in channel is registered by then)

    spec = dict(params["channel"])
    ch = CHANNELS.get(spec["name"]).model_validate(spec)
    x = inputs[0]
    elements = int(params.get("elements", x.size))
    state: dict[str, Any] = ctx.state if ch.keeps_state else {}
    if params.get("reset"):
        state.clear()
    ref = None
    if len(inputs) > 1:  # the update: the difference from the reference both ends hold, added back on arrival
        ref = np.asarray(inputs[1], dtype=np.float32)
        if ref.shape != x.shape:
            raise ValueError(f"channel {ch.name!r} (applies_to: update): the message has {x.shape} values, the "
                             f"model its receiver last sent has {ref.shape}; use applies_to: model here")
    message = ch.encode(x if ref is None else (x - ref).astype(np.float32), state, rng)
    out = np.asarray(ch.decode(message, elements), dtype=np.float32)
    if ref is not None:
        out = (ref + out.reshape(x.shape)).astype(np.float32)
    if out.shape != x.shape:
        raise ValueError(f"channel {ch.name!r} decoded {out.shape} values from a message of {x.shape}")
    # a length that depends on the values (exact_bytes): the measured one, for the driver to charge
    stats = {"bytes": float(len(message))} if ch.measures_bytes else {}
    return ServerResult([out], 0.0, stats)
