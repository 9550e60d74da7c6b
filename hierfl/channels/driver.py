"""Transfer channels in the driver (``channels:``): what a model message costs on its link, and what arrives.

For a model message (a transfer the protocol does not size itself) on a link direction with a channel
(:mod:`hierfl.channels`), :class:`ChannelLinks` gives the transfer (:meth:`plan`):

* its size: the channel's encoded bytes (from the model's element count and the channel's settings);
* the encode time, before the flow starts, at the sender's compute speed: ``encode_flops /
  (FLOP/s × efficiency)``. A device's FLOP/s is its training throughput in FLOPs, ``speed_sps × 3 ×
  F_fwd`` (training ≈ 3 × forward, as the device tiers are built), at its nominal speed; an edge
  server's and the cloud's are their ``servers:`` figures;
* the decode time, after the last bit and the latency, at the receiver's.

The encoding and decoding are not stretched by slowdown windows [D]; with ``energy:`` a device's share of them
(its encoding, its decoding of a download) costs joules at its active power (``EnergyLedger.work``).

What the receiver gets is :meth:`coded`: the message's vector encoded and decoded by the channel, computed by
the executor's cloud role as a server task (:mod:`hierfl.channels.server`), where a channel that
keeps per-sender state keeps it (saved in checkpoints with the roles' state). A stateless channel's result
is remembered for the last few handles, so a model broadcast to many devices is encoded once: the cost per
event does not grow with the number of devices. A channel with ``applies_to: update`` encodes the difference
from the model the lower end (a device, or an edge server on the edge tier) last received through that tier's
downlink (the reference both ends know; before any, the model itself), and the receiver adds it back. A channel
that keeps state and resets on migration has its sender's state cleared when the sender's receiver changes.
A channel whose length depends on the values (``exact_bytes``: :attr:`Channel.measures_bytes`) is charged
the length measured when the message was coded (the protocol codes an upload before it sends it); bytes and
times then depend on the model's values. Timing-only runs (``training.trainer: none``) charge bytes
(the fixed lengths) and time and compute nothing.

``summary.json`` gets a ``channels`` block: per direction the channel, its messages (counted when sent),
the bytes sent, the raw float32 bytes they replace and the bytes saved, and the encode and decode seconds;
per tier the bytes saved (``bytes_saved``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.channels.math import DIRECTIONS, direction_of
from hierfl.channels.rules import Channel
from hierfl.core.jobs import Endpoint
from hierfl.core.rng import stream

__all__ = ["ChannelLinks", "device_flops"]

_MEMO = 4          # decoded handles remembered per direction (a stateless channel's broadcast)
_TIER = {"device_uplink": "device_tier", "device_downlink": "device_tier", "edge_uplink": "edge_tier",
         "edge_downlink": "edge_tier"}


def device_flops(scenario: Any, built: Any) -> np.ndarray:
    """(N,) each device's FLOP/s as its training throughput: ``speed_sps × 3 × F_fwd`` of its own model."""
    from hierfl.assemble.hetero import device_models  # noqa: PLC0415 (torch: only runs with a channel)

    world, data = built.world, built.dataset
    shape, classes = tuple(data.input_shape), int(data.num_classes)
    fwd = device_models(scenario, world.tier).forward_flops(lambda fn, cfg, s, c: fn(cfg, s, c), shape, classes)
    return np.asarray(world.speed_sps, dtype=np.float64) * 3.0 * np.asarray(fwd, dtype=np.float64)


class ChannelLinks:
    """The run's channels per link direction: each transfer's bytes and times, and the decoded models."""

    def __init__(self, placed: dict[str, Channel], elements: int, raw_bytes: int, device_flops: np.ndarray,
                 servers: Any, executor: Any, seed: int, computes: bool, nonfinite: Any = None,
                 overhead: dict[str, tuple[int, float, float, float]] | None = None) -> None:
        self.placed = placed              # direction → its channel (the identity left out)
        self.elements = int(elements)
        self.raw_bytes = int(raw_bytes)
        self._device_flops = device_flops
        self._server_flops = {"edge": float(servers.flops_per_s("edge")), "cloud": float(servers.flops_per_s("cloud"))}
        self.executor = executor
        self.seed = seed
        self.computes = computes          # models are trained (not timing only): decode really
        self.nonfinite = nonfinite        # the driver's non-finite ledger: a dropped update is not re-encoded
        # per direction: (encoded bytes, encode flops, decode flops, efficiency), from the shape and settings
        self._cost = {d: (int(c.encoded_bytes(self.elements)), float(c.encode_flops(self.elements)),
                          float(c.decode_flops(self.elements)), float(c.efficiency)) for d, c in self.placed.items()}
        # per direction: [messages, bytes sent, encode s, decode s]
        self.stats: dict[str, list[float]] = {d: [0, 0, 0.0, 0.0] for d in self.placed}
        # work another mechanism adds to every model message of a direction, with or without a channel there (a
        # privacy mechanism's clipping and noise on the sender): direction → (extra bytes, encode FLOPs, decode
        # FLOPs, efficiency), from the shape only; its own totals are ``overhead_stats`` (same layout as stats)
        self._extra = {d: (int(b), float(e) * self.elements, float(x) * self.elements, float(eff))
                       for d, (b, e, x, eff) in (overhead or {}).items()}
        self.overhead_stats: dict[str, list[float]] = {d: [0, 0, 0.0, 0.0] for d in self._extra}
        self._memo: dict[str, list[tuple[Any, Any]]] = {d: [] for d in self.placed}
        self._sent: dict[tuple[str, int], int] = {}  # messages coded per (direction, sender): their seed streams
        # ``applies_to: update``: the model each device or edge server last received on its tier's downlink, the
        # reference of its next update (and of its next download's difference); kept only where a channel needs it
        self._references = any(c.applies_to == "update" for c in self.placed.values())
        self._held: dict[Endpoint, Any] = {}
        self._measured: dict[tuple[Endpoint, Endpoint], int] = {}  # exact_bytes: lengths of coded, unsent messages
        self._peer: dict[tuple[str, int], Endpoint] = {}  # each stateful sender's last receiver (reset_on_migration)
        # another mechanism's transform of a direction's messages before its channel: direction → (server task,
        # its params, told each sender) — a device's local-DP release (privacy.dp); set by the driver
        self._transforms: dict[str, tuple[str, dict[str, Any], Any]] = {}

    def transform(self, direction: str, task: str, params: dict[str, Any], notify: Any) -> None:
        """Every model message of ``direction`` becomes the server task ``task``'s output on ``[message, reference]``
        (the model the lower end last received: what a device trained from) before any channel codes it, with a
        seed of its own per sender and message; ``notify(sender, stats)`` is told of each, with the task's stats
        (e.g. an accountant)."""
        self._transforms[direction] = (task, dict(params), notify)
        self._references = True

    # -- timing ------------------------------------------------------------------------------------------
    def flops_of(self, end: Endpoint) -> float:
        """FLOP/s of an end: a device's training throughput, an edge server's or the cloud's ``servers:``."""
        kind = end[0]
        if kind == "device":
            return float(self._device_flops.item(int(end[1])))
        return self._server_flops[kind]

    def plan(self, kind: str, src: Endpoint, dst: Endpoint) -> tuple[int, float, float] | None:
        """``(bytes, encode s, decode s)`` of a model message over a route of ``kind``; None: no channel there."""
        direction = direction_of(kind, src[0])
        if direction is None:
            return None
        cost = self._cost.get(direction)
        extra = self._extra.get(direction)
        if cost is None and extra is None:
            return None
        size, encode_s, decode_s = self.raw_bytes, 0.0, 0.0
        if cost is not None:
            size, enc, dec, eff = cost
            if self._measured:  # a length measured on the encoded message (exact_bytes), coded before it is sent
                size = self._measured.pop((src, dst), size)
            encode_s = enc / (self.flops_of(src) * eff) if enc > 0 else 0.0
            decode_s = dec / (self.flops_of(dst) * eff) if dec > 0 else 0.0
            stats = self.stats[direction]
            stats[0] += 1
            stats[1] += size
            stats[2] += encode_s
            stats[3] += decode_s
        if extra is not None:
            more, enc, dec, eff = extra
            enc_s = enc / (self.flops_of(src) * eff) if enc > 0 else 0.0
            dec_s = dec / (self.flops_of(dst) * eff) if dec > 0 else 0.0
            size, encode_s, decode_s = size + more, encode_s + enc_s, decode_s + dec_s
            stats = self.overhead_stats[direction]
            stats[0] += 1
            stats[1] += more
            stats[2] += enc_s
            stats[3] += dec_s
        return size, encode_s, decode_s

    # -- values ------------------------------------------------------------------------------------------
    @staticmethod
    def _direction(src: Endpoint, dst: Endpoint) -> str | None:
        a, b = src[0], dst[0]
        if a == "device":
            return "device_uplink" if b != "device" else None
        if b == "device":
            return "device_downlink"
        return "edge_uplink" if a == "edge" else "edge_downlink"

    def channel(self, src: Endpoint, dst: Endpoint) -> tuple[str, Channel] | None:
        """``(direction, channel)`` of a model message ``src → dst``; None: none there."""
        direction = self._direction(src, dst)
        ch = self.placed.get(direction) if direction is not None else None
        return None if ch is None else (direction, ch)  # type: ignore[return-value]

    def _transformed(self, src: Endpoint, dst: Endpoint, handle: Any) -> Any:
        """``handle`` through the direction's transform (:meth:`transform`), or itself where there is none."""
        direction = self._direction(src, dst)
        spec = self._transforms.get(direction) if direction is not None else None
        if spec is None or handle is None:
            return handle
        task, params, notify = spec
        sender = int(src[1])
        if not self.computes or (self.nonfinite is not None and self.nonfinite.marked(handle)):
            notify(sender, {})
            return handle
        lower = src if direction.endswith("uplink") else dst  # type: ignore[union-attr]
        ref = self._held.get(lower)
        if ref is None:
            raise RuntimeError(f"{task} on {direction}: {lower} sent a model before it received one")
        key = (f"transform:{direction}", sender)
        k = self._sent.get(key, 0)
        self._sent[key] = k + 1
        seed = int(stream(self.seed, "transform", DIRECTIONS.index(direction), sender, k).integers(2**63 - 1))
        outputs, _, stats, _ = self.executor.servers.run_task(task, params, seed, f"{task}:{direction}", sender,
                                                              [handle, ref])
        notify(sender, dict(stats))
        return outputs[0]

    def coded(self, src: Endpoint, dst: Endpoint, handle: Any) -> Any:
        """The model the receiver of a model message ``src → dst`` carrying ``handle`` gets: decode(encode(·))."""
        if self._transforms:
            handle = self._transformed(src, dst, handle)
        found = self.channel(src, dst)
        if handle is None or not self.computes:
            return handle
        if found is None:
            if self._references and dst[0] != "cloud" and src[0] != "device":
                self._held[dst] = handle  # a downlink without a channel: the reference of the receiver's update
            return handle
        if self.nonfinite is not None and self.nonfinite.marked(handle):
            return handle  # a dropped non-finite update stays the handle the ledger knows
        direction, ch = found
        uplink = direction.endswith("uplink")
        lower = src if uplink else dst   # the device (or edge server) end: its last received model is the reference
        ref = self._held.get(lower) if ch.applies_to == "update" else None
        memo = self._memo[direction]
        if not ch.keeps_state and ref is None:
            for old, new in memo:
                if old is handle:
                    return self._received(direction, dst, new)
        sender = int(src[1])
        key = (direction, sender)
        k = self._sent.get(key, 0)
        self._sent[key] = k + 1
        seed = int(stream(self.seed, "channel", DIRECTIONS.index(direction), sender, k).integers(2**63 - 1))
        # the vector as it moves is encoded whole (its length is the decoder's ``elements``); the bytes charged are the
        # message's (``self.elements`` values: what travels, e.g. without layers a device keeps)
        params: dict[str, Any] = {"channel": ch.model_dump(mode="json")}
        if ch.keeps_state and ch.resets_on_migration:
            last = self._peer.get(key)
            self._peer[key] = dst
            if last is not None and last != dst:
                params["reset"] = True
        inputs = [handle] if ref is None else [handle, ref]
        outputs, _, stats, _ = self.executor.servers.run_task("channel", params, seed, f"channel:{direction}", sender,
                                                              inputs)
        decoded = outputs[0]
        if ch.measures_bytes:  # its length depends on the values: charged when the message is sent
            self._measured[(src, dst)] = int(stats["bytes"])
        if not ch.keeps_state and ref is None:
            memo.append((handle, decoded))
            if len(memo) > _MEMO:
                del memo[0]
        return self._received(direction, dst, decoded)

    def _received(self, direction: str, dst: Endpoint, decoded: Any) -> Any:
        """Note the model a downlink's receiver now holds (the reference of its next update), return it."""
        if self._references and not direction.endswith("uplink"):
            self._held[dst] = decoded
        return decoded

    # -- summary -----------------------------------------------------------------------------------------
    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s ``channels`` block (none when only another mechanism's work rides on the messages)."""
        if not self.placed:
            return {}
        out: dict[str, Any] = {}
        saved = {"device_tier": 0, "edge_tier": 0}
        for d in DIRECTIONS:
            if d not in self.placed:
                continue
            n, sent, enc, dec = self.stats[d]
            raw = int(n) * self.raw_bytes
            saved[_TIER[d]] += raw - int(sent)
            out[d] = {"channel": self.placed[d].name, "messages": int(n), "bytes": int(sent), "raw_bytes": raw,
                      "saved_bytes": raw - int(sent), "encode_s": enc, "decode_s": dec}
        return {"channels": {**out, "bytes_saved": saved}}
