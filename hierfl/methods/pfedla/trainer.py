"""pFedLA's server-side math: per-client hypernetworks that weight every client's layers.

X. Ma, J. Zhang, S. Guo, W. Xu, "Layer-wised Model Aggregation for Personalized Federated Learning",
CVPR 2022 (arXiv 2205.03993). No official code exists; the rules follow an unofficial implementation
(KarhouTam's ``pFedLA`` and its successor in FL-bench) and the sign of the hypernetwork update follows the
official pFedHN code (docs/explanation/algorithms.md, pFedLA).

For every client ``i`` of an aggregation point with ``N`` clients the server keeps a hypernetwork
``HN_i``: an embedding ``v_i ∈ R^{d_e}``, an MLP ``d_e → h → h → h`` with ReLU after every layer, and
one head ``Linear(h, N)`` per layer ``l`` of the model (heads initialised ``U(0, 1)``, bias 0, so that
the weights start positive). It gives

* ``α_i^l = ReLU(head_l(MLP(v_i))) ∈ R^N``, normalised ``â_i^l = α_i^l / Σ_j α_i^{l,j}`` (the one-hot
  weight of client ``i`` where the sum is 0), and client ``i``'s personalised model layer by layer:
  ``θ̄_i^l = Σ_j â_i^{l,j} θ_j^l``;
* with ``k_keep > 0`` (HeurpFedLA) the ``k_keep`` layers with the largest self-weight ``α_i^{l,i}`` use
  the one-hot weight: the client keeps its own layer;
* on client ``i``'s return with ``θ_i^new``: ``ψ_i ← ψ_i − η·(∂θ̄_i/∂ψ_i)ᵀ g`` over all of ``HN_i``'s
  parameters ``ψ_i`` (embedding included), with ``g = θ̄_i − θ_i^new`` (``vjp_sign = "old_minus_new"``,
  pFedHN's sign) or ``θ_i^new − θ̄_i`` (``"new_minus_old"``, the unofficial pFedLA codes). Kept layers are
  left out of the product.

The vector–Jacobian product never differentiates through the big model tensors: since
``θ̄_i^l = Σ_j â^{l,j} θ_j^l`` with the stored ``θ_j`` constant, ``∂/∂â^{l,j} (gᵀ θ̄_i) = θ_j^lᵀ g^l``;
these ``N·L`` dot products are computed once and back-propagated through the small hypernetwork.

A hypernetwork travels as one flat float32 vector (so that it can be kept in a server's state and
checkpointed) in the order embedding, ``W1, b1, W2, b2, W3, b3`` (PyTorch's ``(out, in)`` weights),
then every head's weight ``(N, h)`` and finally every head's bias ``(N,)``.

The layer-wise sums themselves (aggregation units, normalised weights, ``θ̄``) are pure numpy in
:mod:`hierfl.methods.pfedla.math`. Sums over clients run in a fixed order in float64 (element-wise numpy, no
BLAS reductions), so the result does not depend on thread counts.

The hypernetwork computes on the server's device (``device``: the run's ``runtime.device`` where the
server holds one): a job uploads client ``i``'s hypernetwork once, steps it and forms the new weights
there, and downloads the stepped vector once (counted in ``transfers``); the ``L × N`` weights are read
back as they are small. The store (``N × P`` models) and the model-sized sums stay on the host, in
float64 numpy: they are checkpointed as host arrays, and numpy's summation order is what gives a CPU
run its bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from hierfl.methods.pfedla.math import Granularity, kept_layers, layer_groups, layer_weights, personalise

if TYPE_CHECKING:
    import torch

    from hierfl.learn.staging import Transfers

__all__ = ["Granularity", "HyperShape", "VjpSign", "client_update", "create_store", "hn_alpha", "hypernet_step", "init_hypernet",
           "kept_layers", "layer_groups", "layer_weights", "pack_hypernet", "personalise", "store_mean", "update_flops"]

VjpSign = Literal["old_minus_new", "new_minus_old"]


@dataclass(frozen=True)
class HyperShape:
    """The shape of one client's hypernetwork: embedding ``embed_dim``, width ``hidden_dim``, ``layers``
    heads over ``clients`` clients."""

    embed_dim: int
    hidden_dim: int
    layers: int
    clients: int

    def parts(self) -> list[tuple[str, tuple[int, ...]]]:
        """``(name, shape)`` of every part of the flat vector, in its order."""
        e, h, n, L = self.embed_dim, self.hidden_dim, self.clients, self.layers
        return [("embedding", (e,)), ("w1", (h, e)), ("b1", (h,)), ("w2", (h, h)), ("b2", (h,)),
                ("w3", (h, h)), ("b3", (h,)), ("head_w", (L, n, h)), ("head_b", (L, n))]

    @property
    def size(self) -> int:
        """Floats of the flat vector."""
        return sum(math.prod(s) for _, s in self.parts())

    @property
    def forward_flops(self) -> int:
        """FLOPs of one forward pass (2 per multiply-add of its linear maps)."""
        e, h, n, L = self.embed_dim, self.hidden_dim, self.clients, self.layers
        return 2 * (e * h + 2 * h * h + L * h * n)


def pack_hypernet(shape: HyperShape, **parts: np.ndarray) -> np.ndarray:
    """The flat float32 vector from its named parts (see :meth:`HyperShape.parts`)."""
    out = []
    for name, s in shape.parts():
        arr = np.asarray(parts[name], dtype=np.float32)
        if arr.shape != s:
            raise ValueError(f"hypernetwork part {name!r} has shape {arr.shape}, expected {s}")
        out.append(arr.ravel())
    return np.concatenate(out)


def init_hypernet(shape: HyperShape, rng: np.random.Generator) -> np.ndarray:
    """A fresh hypernetwork drawn from ``rng`` (the stream ``hn_init``), as the unofficial code initialises
    it: the embedding ``N(0, 1)`` (``nn.Embedding``), the MLP like PyTorch's ``nn.Linear``
    (weights and biases ``U(−1/√fan_in, 1/√fan_in)``), the heads' weights ``U(0, 1)`` and biases 0."""
    e, h, n, L = shape.embed_dim, shape.hidden_dim, shape.clients, shape.layers

    def linear(out_f: int, in_f: int) -> tuple[np.ndarray, np.ndarray]:
        bound = 1.0 / math.sqrt(in_f)
        return rng.uniform(-bound, bound, (out_f, in_f)), rng.uniform(-bound, bound, out_f)

    emb = rng.standard_normal(e)
    w1, b1 = linear(h, e)
    w2, b2 = linear(h, h)
    w3, b3 = linear(h, h)
    head_w = rng.uniform(0.0, 1.0, (L, n, h))
    return pack_hypernet(shape, embedding=emb, w1=w1, b1=b1, w2=w2, b2=b2, w3=w3, b3=b3, head_w=head_w,
                         head_b=np.zeros((L, n)))


def hn_alpha(hn: object, shape: HyperShape) -> object:
    """``α = ReLU(head_l(MLP(v)))`` for every layer: a ``(layers, clients)`` torch tensor, differentiable in
    ``hn`` (a flat torch tensor)."""
    import torch

    views: dict[str, torch.Tensor] = {}
    offset = 0
    for name, s in shape.parts():
        size = math.prod(s)
        views[name] = hn[offset:offset + size].reshape(s)  # type: ignore[index]
        offset += size
    x = views["embedding"]
    for k in (1, 2, 3):
        x = torch.relu(views[f"w{k}"] @ x + views[f"b{k}"])
    return torch.relu(views["head_w"] @ x + views["head_b"])


def hypernet_step(hn: np.ndarray, shape: HyperShape, models: np.ndarray, groups: Sequence[np.ndarray],
                  client: int, sent: np.ndarray, trained: np.ndarray, lr: float, k_keep: int = 0,
                  vjp_sign: VjpSign = "old_minus_new", device: str = "cpu") -> np.ndarray:
    """One SGD step of client ``client``'s hypernetwork on its return: ``ψ − lr·(∂θ̄/∂ψ)ᵀ g``.

    ``models`` are the stored ``θ_j`` the personalised model is built from (constants), ``sent`` the
    model ``θ̄`` the client trained from and ``trained`` its result ``θ^new``; ``g = sent − trained``
    (``"old_minus_new"``) or ``trained − sent`` (``"new_minus_old"``). Kept layers (``k_keep``) and rows
    whose ``α`` sums to 0 carry no gradient. ``device``: where the hypernetwork is stepped.
    """
    from hierfl.learn.local import download

    return download(_step(_upload(hn, device), shape, models, groups, client, sent, trained, lr, k_keep, vjp_sign))


def _upload(hn: np.ndarray, device: str) -> torch.Tensor:
    """A hypernetwork's flat vector as a new float32 tensor on ``device``."""
    import torch

    return torch.from_numpy(np.array(hn, dtype=np.float32)).to(device)


def _step(hn: torch.Tensor, shape: HyperShape, models: np.ndarray, groups: Sequence[np.ndarray], client: int,
          sent: np.ndarray, trained: np.ndarray, lr: float, k_keep: int, vjp_sign: VjpSign) -> torch.Tensor:
    """:func:`hypernet_step` on a hypernetwork already on its device; the stepped vector stays there."""
    import torch

    from hierfl.learn.local import download

    grad_out = np.asarray(sent, dtype=np.float64) - np.asarray(trained, dtype=np.float64)
    if vjp_sign == "new_minus_old":
        grad_out = -grad_out
    n = models.shape[0]
    # s[l, j] = θ_j^l · g^l: the gradient of gᵀθ̄ with respect to the normalised weight â^{l,j}
    s = np.zeros((len(groups), n), dtype=np.float64)
    for l, idx in enumerate(groups):
        g = grad_out[idx]
        for j in range(n):
            s[l, j] = float((models[j, idx].astype(np.float64) * g).sum())
    params = hn.detach().clone().requires_grad_(True)
    alpha = hn_alpha(params, shape)
    a_np = download(alpha)  # (L, N): small, read to choose the kept and live layers
    kept = kept_layers(a_np, client, k_keep)
    live = [l for l in range(len(groups)) if l not in kept and a_np[l].sum() > 0]
    if not live:
        return params.detach()
    rows = alpha[live]  # type: ignore[index]
    a_hat = rows / rows.sum(dim=1, keepdim=True)
    objective = (a_hat * torch.tensor(s[live], dtype=torch.float32).to(hn.device)).sum()
    (grad,) = torch.autograd.grad(objective, params)
    return params.detach() - lr * grad


def update_flops(shape: HyperShape, params: int) -> float:
    """FLOPs of one client's server job (design default): the hypernetwork update and the next
    personalised model. ``6·N·P`` for the weighted sums (``N·P`` multiply-adds to build ``θ̄``, about
    ``2·N·P`` for the vector–Jacobian product) plus ``4·F_hn`` for the hypernetwork (a forward and
    backward, ``3·F_hn``, for the update, and a forward for the new weights)."""
    return 6.0 * shape.clients * params + 4.0 * shape.forward_flops


# -- the server jobs, as plain functions of a server's state -------------------------------------------


def _shape(params: dict[str, object], layers: int) -> HyperShape:
    return HyperShape(int(params["embed_dim"]), int(params["hidden_dim"]), layers,  # type: ignore[call-overload]
                      int(params["clients"]))  # type: ignore[call-overload]


def create_store(state: dict[str, np.ndarray], shape: HyperShape, models: np.ndarray, seeds: Sequence[int]) -> None:
    """The server's store: ``models`` ``(N, P)``, every client's initial model, and one hypernetwork per
    client drawn from its own seed (the stream ``hn_init``)."""
    if len(seeds) != shape.clients or models.shape[0] != shape.clients:
        raise ValueError(f"pfedla: {len(seeds)} hypernetwork seeds and {models.shape[0]} models for "
                         f"{shape.clients} clients")
    state["models"] = np.asarray(models, dtype=np.float32)
    state["hypernets"] = np.stack([init_hypernet(shape, np.random.default_rng(int(s))) for s in seeds])


def _ensure_store(state: dict[str, np.ndarray], shape: HyperShape, initial: np.ndarray,
                  seeds: Sequence[int]) -> None:
    """Create the server's store on its first job if no ``pfedla_init`` job did: every client's model is
    the common initial model (identical initialisation, design default)."""
    if "models" not in state:
        create_store(state, shape, np.tile(np.asarray(initial, dtype=np.float32), (shape.clients, 1)), seeds)


def client_update(state: dict[str, np.ndarray], trained: np.ndarray, sent: np.ndarray,
                  layout: Sequence[tuple[str, tuple[int, ...]]], params: dict[str, object], device: str = "cpu",
                  transfers: Transfers | None = None) -> tuple[np.ndarray, float, dict[str, float]]:
    """One client's server job: step ``HN_i`` on its return, store ``θ_i``, form its next ``θ̄_i``.

    ``state`` holds ``models`` ``(N, P)`` and ``hypernets`` ``(N, H)`` (created here on the first job, from
    ``sent``, the common initial model); ``params``: ``client``, ``clients``, ``seeds``, ``hn_lr``,
    ``embed_dim``, ``hidden_dim``, ``k_keep``, ``vjp_sign``, ``granularity``. Returns the personalised
    model, the FLOPs to charge (:func:`update_flops`) and the job's statistics: ``kept_params``, the floats
    of the layers the client keeps (HeurpFedLA), and ``self_weight``, the mean over layers of ``â^{l,i}``.
    ``device``: where the hypernetwork is stepped and evaluated (one upload and one download of it, counted
    in ``transfers`` if given).
    """
    import torch

    from hierfl.learn.local import download

    groups = layer_groups(layout, params.get("granularity", "layer"))  # type: ignore[arg-type]
    shape = _shape(params, len(groups))
    client = int(params["client"])  # type: ignore[call-overload]
    k_keep = int(params.get("k_keep", 0))  # type: ignore[call-overload]
    _ensure_store(state, shape, sent, params["seeds"])  # type: ignore[arg-type]
    models, hns = state["models"], state["hypernets"]
    # the product is taken at the store as it is now (other clients may have returned since i was sent)
    hn = _step(_upload(hns[client], device), shape, models, groups, client, sent, trained,
               float(params["hn_lr"]), k_keep, params.get("vjp_sign", "old_minus_new"))  # type: ignore[arg-type]
    hns[client] = download(hn)
    if transfers is not None:
        transfers.count("h2d", 1)
        transfers.count("d2h", 1)
    models[client] = trained
    with torch.no_grad():  # the new weights from the stepped hypernetwork where it is (no second upload)
        alpha = download(hn_alpha(hn, shape))  # type: ignore[arg-type]
    kept = kept_layers(alpha, client, k_keep)
    weights = layer_weights(alpha, client, kept)
    personal = personalise(models, groups, weights)
    stats = {"kept_params": float(sum(groups[l].size for l in kept)),
             "self_weight": float(weights[:, client].mean())}
    return personal, update_flops(shape, models.shape[1]), stats


def store_mean(state: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    """The uniform mean of a server's stored models (``cloud: average``) and its FLOPs, ``N·P`` additions
    (one per stored value, design default)."""
    if "models" not in state:
        raise ValueError("pfedla: the server's store is empty (no client has returned yet)")
    models = state["models"]
    acc = np.zeros(models.shape[1], dtype=np.float64)
    for j in range(models.shape[0]):  # client order: the same bits in every process
        acc += models[j]
    return (acc / models.shape[0]).astype(np.float32), float(models.size)
