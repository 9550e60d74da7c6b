"""FedMA: layer-wise matched averaging, one communication sub-round per layer, frozen matched layers.

H. Wang, M. Yurochkin, Y. Sun, D. Papailiopoulos, Y. Khazaeni, "Federated Learning with Matched
Averaging", ICLR 2020, arXiv 2002.06440; the rules follow the authors' code (``main.py``: ``BBP_MAP``,
``fedma_comm``, ``local_retrain``). docs/explanation/algorithms.md, "PFNM and FedMA".

One round at a matching point (the cloud when flat, each edge server in a hierarchy), for an MLP with
hidden layers ``1..H``:

1. members train (round 0: ``training`` from their own initialisation; later rounds: ``retrain_epochs``
   on every layer from the global model, or from their matched sub-networks: ``later_rounds``) and upload
   hidden layer 1;
2. for ``l = 1..H``: the server matches layer ``l``'s neurons (incoming weights + bias) — a server job
   charged by its operation count — and sends the global layer ``l`` back; each member takes it, moves
   its layer ``l+1``'s inputs to the global order, freezes layers ``1..l`` (``TrainSpec.frozen``) and
   retrains the rest for ``retrain_epochs`` (when only the output layer remains: ``last_lr_factor`` ×
   the rate, ``last_epochs_factor`` × the epochs, weight decay ``last_weight_decay``), then uploads
   layer ``l+1``;
3. the output layer: every class's row is averaged with the members' class frequencies.

The round's model is the point's (flat: the global model); with edge servers the cloud matches the
edges' models (:mod:`hierfl.methods.matched.protocol`). Each sub-round's upload and download carry one layer's
bytes; the emulator hands the server the member's whole network so that the server job can apply the
member's own input permutation on its behalf (a local permutation, free in the code as here).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from hierfl.core.mlp_layout import frozen_prefix
from hierfl.core.work import TrainSpec
from hierfl.env import Env
from hierfl.kernel.engine import Event
from hierfl.protocols.base import PROTOCOLS
from hierfl.methods.matched.protocol import MatchedConfig, MatchedProtocol, MatchMsg, PointMsg

__all__ = ["FedMA", "FedMAConfig"]


@PROTOCOLS.register
class FedMAConfig(MatchedConfig):
    """``protocol: {name: fedma, retrain_epochs: 20, ...}``: one FedMA round per cloud aggregation."""

    name: Literal["fedma"] = "fedma"
    decides_on_models: ClassVar[str | None] = "the matched widths depend on the trained weights"

    retrain_epochs: PositiveInt = Field(default=20, description="epochs of each retraining after a layer is matched, "
                                                                "and of later rounds' local training (code: 20)")
    retrain_lr: PositiveFloat | None = Field(default=None, description="learning rate of the retraining; null = "
                                                                       "training.lr (code: 0.01 for both)")
    last_lr_factor: PositiveFloat = Field(default=0.1, description="when only the output layer remains to retrain, "
                                                                   "its rate is this × retrain_lr (code: /10)")
    last_epochs_factor: PositiveInt = Field(default=3, description="and its epochs this × retrain_epochs (code: 3)")
    last_weight_decay: NonNegativeFloat = Field(default=1e-4, description="and its weight decay (code: 1e-4)")

    def create(self, env: Env) -> FedMA:
        """A FedMA run."""
        return FedMA(self, env)


class FedMA(MatchedProtocol):
    """Layer-wise sub-rounds at every point, then the cloud's model."""

    def __init__(self, cfg: FedMAConfig, env: Env) -> None:
        super().__init__(cfg, env)
        self.fcfg = cfg

    # -- specs -----------------------------------------------------------------------------------------
    def retrain_spec(self, frozen_layers: int) -> TrainSpec:
        """Retraining with the first ``frozen_layers`` linear layers frozen (0: every layer trains)."""
        c = self.fcfg
        base = self.env.spec
        lr = c.retrain_lr if c.retrain_lr is not None else base.lr
        epochs = c.retrain_epochs
        wd = base.weight_decay
        if frozen_layers == len(self.hidden):  # only the output layer remains
            lr, epochs, wd = lr * c.last_lr_factor, epochs * c.last_epochs_factor, c.last_weight_decay
        frozen = frozen_prefix(self.in_features, self.hidden, self.classes, frozen_layers)
        return dataclasses.replace(base, epochs=epochs, steps=None, lr=lr, weight_decay=wd, frozen=frozen)

    def layer_bytes(self, layer: int, widths: list[int]) -> int:
        """Bytes of linear layer ``layer`` (weights and biases) of a network with these active widths."""
        dims = [self.in_features, *widths, self.classes]
        return 4 * (dims[layer + 1] * dims[layer] + dims[layer + 1])

    # -- the device side ---------------------------------------------------------------------------------
    def _device_round(self, device: int) -> None:
        spec = None if self.round == 0 else self.retrain_spec(0)
        self._job(device, spec, 0)

    def _job(self, device: int, spec: TrainSpec | None, layer: int) -> None:
        job, _ = self.env.start_job(device, self.model[device], MatchMsg(device, self.round, layer), spec,
                                    done="trained")
        self.jobs[device] = job

    def on_trained(self, event: Event) -> None:
        """A (re)training ended: upload the layer the point matches next."""
        msg: MatchMsg = event.payload
        d = msg.device
        job = self.jobs.pop(d)
        self.env.finish_training(job)
        self.model[d] = job.params
        self.env.send(("device", d), self.point_of(d), "layer_arrived", msg, "upload",
                      size=self.layer_bytes(msg.layer, self.widths[d]))

    def on_global_layer_arrived(self, event: Event) -> None:
        """The global layer reached the device: freeze the matched layers, retrain the rest."""
        msg: MatchMsg = event.payload
        d = msg.device
        self._job(d, self.retrain_spec(msg.layer), msg.layer)

    # -- the server side ---------------------------------------------------------------------------------
    def on_layer_arrived(self, event: Event) -> None:
        """A member's layer reached its server; with every member's, the server matches it (or, for the
        output layer, averages it per class)."""
        msg: MatchMsg = event.payload
        point = self.point_of(msg.device)
        arrived = self.arrived[point]
        arrived[msg.device] = self.model[msg.device]
        members = self.points[point]
        if len(arrived) < len(members):
            return
        self.arrived[point] = {}
        inputs = [arrived[m] for m in members]
        widths = [list(self.widths[m]) for m in members]  # copies: the sub-rounds change them
        payload = PointMsg(*point, self.round, msg.layer)
        if msg.layer < len(self.hidden):
            self.env.tier(*point).run("fedma_layer", inputs, "layer_matched", payload=payload,
                                      params={**self.knobs(), "widths": widths, "layer": msg.layer,
                                              "clients": members})
        else:
            self.env.tier(*point).run("fedma_final", inputs, "final_done", payload=payload,
                                      params={"widths": widths[0], "counts": self.point_counts(members)})

    def on_layer_matched(self, event: Event) -> None:
        """Layer ``l`` is matched: every member gets the global layer (and moves its next layer's inputs)."""
        done = event.payload
        msg: PointMsg = done.payload
        point = (msg.tier, msg.entity)
        width = int(done.stats["width"])
        for d, handle in zip(self.points[point], done.outputs):
            self.model[d] = handle
            self.widths[d][msg.layer] = width
            self.env.send(point, ("device", d), "global_layer_arrived", MatchMsg(d, self.round, msg.layer + 1),
                          "download", size=self.layer_bytes(msg.layer, self.widths[d]))

    def on_final_done(self, event: Event) -> None:
        """The output layer is averaged: the point's model for this round."""
        done = event.payload
        msg: PointMsg = done.payload
        point = (msg.tier, msg.entity)
        self.point_model(point, done.outputs[0], list(self.widths[self.points[point][0]]))

