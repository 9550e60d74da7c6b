"""Transfer channels: what a model message becomes on a link (``channels:``).

A *channel* sits on one link direction of one tier. The sender encodes the message's vector, the
encoded message crosses the link, the receiver decodes it; the receiver's model is the decoded vector
(a lossy channel's error is really applied, so learning sees it). A channel declares, for a message
of ``m`` elements:

* :meth:`Channel.encoded_bytes` — its size on the wire, a function of ``m`` and the channel's settings
  only: emulated time never depends on model values (virtual time is the only clock);
* :meth:`Channel.encode_flops` / :meth:`Channel.decode_flops` — the work of encoding and decoding,
  charged in emulated time at the sender's and the receiver's compute speed (a device's FLOP/s,
  an edge server's or the cloud's ``servers:`` figure), divided by ``efficiency`` (vector ops are
  memory-bound: a fraction of a processor's training FLOP/s);
* :meth:`Channel.encode` / :meth:`Channel.decode` — the vector to the message and back (numpy arrays
  today; the signatures do not fix the array type);
* ``keeps_state`` — whether it keeps per-sender state across messages (an error-feedback residual).
  Such state is a dictionary of arrays per (link direction, sender), kept beside the servers' task
  state and saved in checkpoints, like a job method's per-device state.

The link directions (:data:`DIRECTIONS`) follow the scenario's tier vocabulary (``bytes_device_tier``,
``bytes_edge_tier``): ``device_uplink`` (a device to its edge server, or to the cloud where there are
no edge servers), ``device_downlink`` (back), ``edge_uplink`` (an edge server to the cloud) and
``edge_downlink`` (back). Device ↔ device hops carry no channel.

A channel is a plug-in like the others: a config model registered in :data:`CHANNELS` under the name
used in YAML (``hierfl.plugin`` exports both). This package ships ``none`` (the identity: today's
bytes and bits), ``fp16`` and ``bf16``, and the update compressors ``qsgd``, ``sign_ef``, ``topk_ef``,
``randk_ef``, ``dgc`` and ``polyline`` (a real encoder's byte string, of a length fixed by the shape and the
settings unless ``exact_bytes`` opts into the measured one;
``applies_to: update`` encodes the difference from the model the lower end last received on the tier).

Modules, by role: :mod:`~hierfl.channels.math` (the directions, the 16-bit casts; ``math.codec``: the
compressors' arithmetic and wire formats; numpy only),
:mod:`~hierfl.channels.rules` (the ``Channel`` base class, the registry, ``none`` / ``fp16`` / ``bf16``;
its modules ``compressor``, ``quantise`` and ``sparse``: the compressors),
:mod:`~hierfl.channels.config` (the ``channels:`` section), :mod:`~hierfl.channels.server` (the server task
that encodes and decodes in the executor's cloud role), :mod:`~hierfl.channels.driver` (what the driver
charges and reports).
"""
