"""Local training on flat parameter vectors: deterministic init, minibatch SGD, evaluation.

Model parameters travel as one contiguous float32 vector (ARCHITECTURE.md §3) in the order of
``module.parameters()``, followed by the running statistics of batch-norm layers (see :func:`param_layout`
and :mod:`hierfl.models.state`). :class:`LocalTrainer` owns one torch module
whose parameters are views into a single flat buffer, so loading a vector is one ``memcpy`` and
reading the result is one copy.

Determinism (ARCHITECTURE.md §2): data order comes only from ``np.random.default_rng(seed)``,
initialisation only from a ``torch.Generator`` seeded explicitly, and the trainer pins an
explicit torch thread count; no global RNG is read or advanced.

Device (``runtime.device``): the module, its flat buffer, the optimiser's state and every batch live on the
trainer's torch device. On ``cpu`` the flat buffer shares memory with a numpy array and nothing is copied;
on ``cuda`` a job's start vector goes up once, its batches go up once per block (epoch or permutation), its
loss is summed on the device, and the result and the loss come down once at the end of the job. The data
order and the dropout masks come from CPU generators on every device (a mask is drawn on the CPU and moved),
so a job draws the same random numbers wherever it trains.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch, num_steps, samples_processed
from hierfl.learn.chain import LinearChain
from hierfl.learn.precision import autocast, check_precision, cuda_determinism
from hierfl.learn.randomness import DrawMasks, dropout_sites, job_generator
from hierfl.learn.sgd import ExactSGD
from hierfl.learn.staging import Transfers
from hierfl.models.state import buffers_as_views, state_buffers, state_layout

if TYPE_CHECKING:
    import torch

    from hierfl.models import ModelConfig

__all__ = [
    "LocalTrainer",
    "TrainSpec",
    "count_params",
    "download",
    "effective_batch",
    "final_block_flops",
    "forward_flops",
    "index_blocks",
    "init_params",
    "model_layout",
    "num_steps",
    "param_layout",
    "samples_processed",
]


def download(t: torch.Tensor) -> np.ndarray:
    """A new numpy array with the values of ``t`` (from any device: one copy to the host, never a view)."""
    return t.detach().to("cpu", copy=True).numpy()


def param_layout(module: torch.nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of each parameter, then of each carried buffer, in the order of the flat vector
    (:func:`hierfl.models.state.state_layout`)."""
    return state_layout(module)


def model_layout(model_cfg: ModelConfig, input_shape: tuple[int, ...],
                 num_classes: int) -> list[tuple[str, tuple[int, ...]]]:
    """:func:`param_layout` of the model ``model_cfg`` builds (a plain function of configs, so that
    it can run in another process: see :class:`hierfl.runtime.start.ExecutorStart.model_call`)."""
    return param_layout(model_cfg.build(input_shape, num_classes))


def count_params(model_cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int) -> int:
    """Length of the flat parameter vector (parameters and carried buffers)."""
    module = model_cfg.build(input_shape, num_classes)
    return sum(p.numel() for p in module.parameters()) + sum(b.numel() for _, b in state_buffers(module))


def forward_flops(model_cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int) -> int:
    """FLOPs of one sample's forward pass: ``2 *`` multiply-adds of the Linear/Conv2d/LSTM layers.

    Biases, activations, pooling, embeddings and the LSTM's element-wise gate products are not counted.
    A layer run twice per sample (a dual-input model's shared backbone) counts twice.
    """
    return _flops(model_cfg.build(input_shape, num_classes), input_shape, None)


def final_block_flops(model_cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int) -> int:
    """FLOPs of one sample's pass through the model's final block (:class:`~hierfl.models.nets.FinalBlockTaps`),
    counted as :func:`forward_flops` counts them: a slim pass at width ``ω`` costs ``ω²`` of it."""
    module = model_cfg.build(input_shape, num_classes)
    return _flops(module, input_shape, module.final_block_layers())  # type: ignore[operator]


def _flops(module: torch.nn.Module, input_shape: tuple[int, ...], only: list[torch.nn.Module] | None) -> int:
    """``2 *`` the multiply-adds of one sample's forward pass through ``module``'s layers (or ``only`` those)."""
    import torch
    from torch import nn

    macs = 0

    def hook(layer: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        nonlocal macs
        if isinstance(layer, nn.Linear):
            macs += layer.in_features * layer.out_features
        elif isinstance(layer, nn.LSTM):
            # per time step and layer: 4 gates, each (input + hidden) x hidden multiply-adds
            steps = inputs[0].shape[1] if layer.batch_first else inputs[0].shape[0]
            h = layer.hidden_size
            macs += steps * sum(4 * h * ((layer.input_size if k == 0 else h) + h) for k in range(layer.num_layers))
        elif isinstance(layer, nn.Conv2d):
            kh, kw = layer.kernel_size
            macs += output[0].numel() * (layer.in_channels // layer.groups) * kh * kw

    layers = only if only is not None else [m for m in module.modules()
                                            if isinstance(m, (nn.Linear, nn.Conv2d, nn.LSTM))]
    handles = [m.register_forward_hook(hook) for m in layers]
    module.eval()  # batch norm on one sample, and no dropout draws
    try:
        with torch.no_grad():
            module(torch.zeros(1, math.prod(input_shape)))
    finally:
        for h in handles:
            h.remove()
    return 2 * macs


def init_params(model_cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int, seed: int) -> np.ndarray:
    """Initial flat float32 parameters, a function of ``seed`` only (identical bits in any process).

    Every Linear/Conv2d is initialised like PyTorch's default from a ``torch.Generator``
    seeded with ``seed`` (see :func:`hierfl.models.nets.reset_parameters_`).
    """
    import torch

    module = model_cfg.build(input_shape, num_classes, seed=seed)
    tensors = [*module.parameters(), *(b for _, b in state_buffers(module))]
    return torch.nn.utils.parameters_to_vector(tensors).detach().numpy().copy()


def index_blocks(n: int, b: int, spec: TrainSpec, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """A job's data order: blocks of sample indices, each cut into consecutive batches of ``b``.

    Every trainer (one job at a time, batched, reference) reads its data order from here. Epoch mode: one ``rng.permutation(n)`` per epoch (its last batch may be partial).
    Step mode: a stream of concatenated permutations, ``steps`` chunks of exactly ``b``.
    """
    if spec.epochs is not None:
        for _ in range(spec.epochs):
            yield rng.permutation(n)
        return
    assert spec.steps is not None
    remaining = spec.steps
    carry = np.empty(0, dtype=np.int64)
    while remaining > 0:
        stream = np.concatenate([carry, rng.permutation(n)]) if carry.size else rng.permutation(n)
        k = min(stream.size // b, remaining)  # >= 1 because b <= n
        yield stream[: k * b]
        carry = stream[k * b :]
        remaining -= k


class LocalTrainer:
    """Owns one torch module; trains it from flat float32 parameter vectors.

    One instance per process/actor. The module's parameters are views into one flat buffer;
    ``torch.set_num_threads(torch_threads)`` is called here and again before each job if some
    other code changed it, since results depend on the thread count.

    Attributes
    ----------
    num_params
        Length of the flat parameter vector (parameters, then carried buffers: :mod:`hierfl.models.state`).
    num_trainable
        Its leading entries that are parameters (the rest are running statistics).
    layout
        ``(name, shape)`` per parameter and carried buffer, in vector order.
    dropout
        The forward pass's dropout calls (:func:`hierfl.learn.randomness.dropout_sites`); their masks
        come from each job's own generator.
    device
        The torch device of training and evaluation, ``cpu`` or ``cuda`` (``runtime.device`` resolved):
        the module, the flat buffer and the optimiser's state live there.
    precision
        ``fp32`` or ``bf16`` (``runtime.precision``, :mod:`hierfl.learn.precision`).
    """

    def __init__(self, model_cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int, torch_threads: int = 1,
                 device: str = "cpu", precision: str = "fp32") -> None:
        import torch

        if torch_threads < 1:
            raise ValueError(f"torch_threads must be >= 1, got {torch_threads}")
        self.torch_threads = int(torch_threads)
        torch.set_num_threads(self.torch_threads)
        self.model_cfg = model_cfg
        self.input_shape = tuple(int(s) for s in input_shape)
        self.num_classes = int(num_classes)
        self.in_features = math.prod(self.input_shape)
        # the torch device of training and evaluation (runtime.device, resolved by the host)
        self.device = str(device)
        if torch.device(self.device).type == "cuda":  # repeatable GPU arithmetic (no TF32, deterministic cuDNN)
            cuda_determinism()
        self.module = model_cfg.build(self.input_shape, self.num_classes).to(self.device)
        self.layout = param_layout(self.module)
        self._params = list(self.module.parameters())
        self.num_trainable = sum(p.numel() for p in self._params)
        self._buffers = state_buffers(self.module)
        self.num_params = self.num_trainable + sum(b.numel() for _, b in self._buffers)
        # One flat buffer; every parameter and carried buffer becomes a view into it (vector order).
        self._flat = torch.nn.utils.parameters_to_vector(
            [*self._params, *(b for _, b in self._buffers)]).detach().clone()
        torch.nn.utils.vector_to_parameters(self._flat[: self.num_trainable], self._params)
        buffers_as_views(self.module, self._flat, self.num_trainable)
        self.dropout = dropout_sites(self.module, self.input_shape)
        # the flat vector as numpy: on the CPU a view of self._flat (no copy ever); on a GPU a host staging
        # array, which receives a job's start vector and sends it up in one copy
        self._flat_np = self._flat.numpy() if self.device == "cpu" else np.empty(self.num_params, dtype=np.float32)
        # Per-job machinery built once: the optimiser's buffers, and hand-written gradients for
        # Linear/ReLU chains (both bit-identical to torch.optim.SGD and autograd).
        self._sgd = ExactSGD(self._params, self._flat)
        # model-sized host↔device crossings of a device's kept state (a device host shares its staging counter)
        self.transfers = Transfers()
        # runtime.precision (hierfl.learn.precision): bf16 autocasts every forward pass; the hand-written
        # chain gradients reproduce autograd's float32 bits only, so bf16 takes autograd for every model
        self.precision = check_precision(precision, self.device)
        self._chain = LinearChain.of(self.module) if self.precision == "fp32" else None

    # -- helpers ---------------------------------------------------------------------------

    def _load(self, params: np.ndarray) -> None:
        import torch

        if torch.get_num_threads() != self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        if isinstance(params, torch.Tensor):  # a start already on the training device: copied there, no crossing
            if tuple(params.shape) != (self.num_params,):
                raise ValueError(f"expected a flat parameter vector of shape ({self.num_params},), "
                                 f"got {tuple(params.shape)}")
            self._flat.copy_(params)
            return
        params = np.asarray(params)
        if params.shape != (self.num_params,):
            raise ValueError(f"expected a flat parameter vector of shape ({self.num_params},), got {params.shape}")
        self._flat_np[...] = params  # numpy copy: works for read-only input, casts to float32
        if self.device != "cpu":  # the job's one upload of its start vector
            self._flat.copy_(torch.from_numpy(self._flat_np))

    def load(self, params: np.ndarray) -> None:
        """Put ``params`` (a flat vector of :attr:`num_params`) into the module (on its device: one copy up)."""
        self._load(params)

    def host_vector(self) -> np.ndarray:
        """A new float32 numpy copy of the module's flat vector (on a GPU: its one copy down)."""
        if self.device == "cpu":
            return self._flat_np.copy()
        return download(self._flat)

    def _check_data(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(x)
        y = np.asarray(y)
        n = x.shape[0] if x.ndim else 0
        if n < 1:
            raise ValueError("need at least one sample")
        if y.shape != (n,):
            raise ValueError(f"labels must have shape ({n},), got {y.shape}")
        x2d = x.reshape(n, -1)  # a view for contiguous input; never written
        if x2d.shape[1] != self.in_features:
            raise ValueError(f"samples have {x2d.shape[1]} features, model expects {self.in_features} ({self.input_shape})")
        return x2d, y

    # -- public API ------------------------------------------------------------------------

    def train(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, spec: TrainSpec, seed: int,
              correction: np.ndarray | None = None, *, rows: np.ndarray | None = None,
              out: np.ndarray | None = None, loss: Callable[..., Any] | None = None,
              opt_state: dict[str, np.ndarray] | None = None,
              on_device: bool = False) -> tuple[Any, dict[str, float]]:
        """Local minibatch SGD starting from ``params``.

        Semantics (the emulator's timing model relies on them):

        - ``b = effective_batch(n, spec)``; data order comes from ``np.random.default_rng(seed)``
          only. Epoch mode: per epoch ``perm = rng.permutation(n)``, consecutive batches of ``b``
          (the last one partial). Step mode: a stream of concatenated permutations cut into
          ``steps`` consecutive chunks of exactly ``b`` (chunks may cross epoch boundaries).
        - Loss: cross-entropy, mean over the batch; or ``loss(module, xb, yb)`` when given (a job method's
          own local objective, differentiable, computed with autograd). Optimiser: ``torch.optim.SGD(lr, momentum,
          weight_decay, foreach=False)`` arithmetic, fresh per call (no state is carried between
          jobs), replayed without ``torch.optim`` by :class:`~hierfl.learn.sgd.ExactSGD`.
          ``spec.proximal = ρ + μ > 0`` adds ``(·/2)‖w − params‖²`` to the loss (a protocol's ρ, Xie et al. 2019;
          a trainer's μ: Li et al., MLSys 2020, docs/explanation/algorithms.md §5.5).
        - ``correction`` (control variates' ``c − c_i``, docs/explanation/algorithms.md §5.6), when given, is
          added to every step's gradient before the optimiser step.
        - ``spec.frozen = k > 0`` (matched averaging's frozen layers): the first ``k`` entries of the vector keep the
          values of ``params`` — restored after every optimiser step, so the trainable entries see exactly
          the gradients of a model whose leading layers are constant.
        - Exactly ``num_steps(n, spec)`` steps over ``samples_processed(n, spec)`` samples.
        - Inputs may be read-only (zero-copy from Ray's object store); they are never written.
          Batches are gathered once per epoch (step mode: once per permutation) with numpy
          fancy indexing, then sliced.
        - Batch norm's running statistics (the vector's tail) are updated by every training forward pass;
          dropout masks come from :func:`~hierfl.learn.randomness.job_generator` of ``seed``, drawn in call
          order (:mod:`hierfl.learn.randomness`), never from torch's global generator.
        - ``spec.dp_sgd`` (sample-level DP-SGD, :mod:`hierfl.learn.dp_sgd`): every step samples its own batch,
          and its gradient is the noised sum of the per-sample clipped gradients over the batch size.
        - ``logreg`` and ``mlp`` take gradients from :class:`~hierfl.learn.chain.LinearChain`
          (no autograd graph), other models from autograd; both are the same bits.
        - Bit-identical for the same (params, x, y, rows, spec, seed, torch_threads), and to
          :func:`hierfl.learn.reference.reference_train` (``torch.optim.SGD`` and autograd).
        - ``precision`` ``bf16`` (:mod:`hierfl.learn.precision`): every model's forward pass runs
          under CPU bfloat16 autocast and its gradients come from autograd; the loss, gradients,
          optimiser state and parameters stay float32. Still bit-identical run to run.

        Parameters
        ----------
        params
            Flat float32 parameter vector to start from.
        x
            Samples, ``(n, prod(input_shape))`` or ``(n, *input_shape)``.
        y
            Integer class labels, ``(n,)``.
        spec
            Hyper-parameters and length of the job.
        seed
            Seed of the data order.
        correction
            Optional flat float32 vector added to each gradient (control variates).
        rows
            Optional sample indices into ``x``/``y``: train on ``x[rows]``, ``y[rows]`` without
            gathering them first (a device host passes the whole data set and the device's rows).
        out
            Optional writable float32 array of ``num_params`` to receive the result (returned).
        opt_state
            The device's kept optimizer state (``optimizer_state: device``; empty before its first job): the job
            continues from it instead of a fresh state, and leaves its own state in it.
        on_device
            Return the result as a new float32 tensor on the training device instead of a host vector (a job
            method that computes on with it there: :class:`~hierfl.learn.kept.DeviceVectors`); ``out`` must then
            be None. ``params`` and ``correction`` may be tensors on the training device either way (copied
            there, nothing crosses).

        Returns
        -------
        (np.ndarray, dict)
            New contiguous writable float32 vector (``out`` when given), and ``{'loss': mean of
            the per-step batch losses, 'steps': k, 'samples': s}``.
        """
        import torch
        import torch.nn.functional as F

        x2d, y = self._check_data(x, y)
        if rows is None:
            n = x2d.shape[0]
        else:
            rows = np.asarray(rows)
            if rows.ndim != 1 or rows.size < 1 or rows.dtype.kind not in "iu":
                raise ValueError(f"rows must be a non-empty 1-d integer array, got shape {rows.shape} ({rows.dtype})")
            n = rows.size
        corr: Any = None
        if on_device and out is not None:
            raise ValueError("a result left on the device has no host row: give out or on_device, not both")
        if isinstance(correction, torch.Tensor):  # (on the training device: the optimiser copies it there)
            corr = correction
        elif correction is not None:
            corr = np.asarray(correction, dtype=np.float32)
        if corr is not None and tuple(corr.shape) != (self.num_params,):
            raise ValueError(f"correction must have shape ({self.num_params},), got {tuple(corr.shape)}")
        self._load(params)
        frozen = int(spec.frozen)
        if frozen > self.num_params:
            raise ValueError(f"spec.frozen = {frozen} exceeds the model's {self.num_params} parameters")
        kept = self._flat[:frozen].clone() if frozen else None
        b = effective_batch(n, spec)
        rng = np.random.default_rng(seed)
        sgd = self._sgd
        sgd.start(spec, corr)
        # (off the CPU a device's kept state stays on the device between its jobs: hierfl.learn.kept)
        kept_on = None if self.device == "cpu" else self.transfers
        if opt_state is not None:
            sgd.load_state(opt_state, kept_on)
        # a job method's own loss goes through autograd (the hand-written chain knows cross-entropy only)
        chain = self._chain if loss is None else None
        objective = loss
        module = self.module
        params_list = self._params
        bf16 = self.precision == "bf16"
        if chain is None:
            module.train()
        loss_sum = 0.0
        steps = 0
        samples = 0
        dev = self.device
        on_cpu = dev == "cpu"
        # off the CPU the batch losses are summed on the device, in float64 as the Python sum below does, and
        # read once at the end of the job (a .item() per step would wait for the device every step)
        loss_acc = None if on_cpu else torch.zeros((), dtype=torch.float64, device=dev)
        no_grad = torch.no_grad()
        if spec.dp_sgd is not None:  # sample-level DP-SGD: per-sample clipped, noised gradients (hierfl.learn.dp_sgd)
            from hierfl.learn.dp_sgd import train_alone

            def restore() -> None:
                if kept is not None:
                    self._flat_np[:frozen] = kept

            names = [name for name, _ in self.layout[: len(params_list)]]
            loss_sum, steps, samples = train_alone(module, params_list, names, sgd, x2d, y, rows, n, spec, seed, restore)
        masks = DrawMasks(job_generator(seed)) if self.dropout and spec.dp_sgd is None else contextlib.nullcontext()
        with masks:
            for block in (index_blocks(n, b, spec, rng) if spec.dp_sgd is None else ()):
                sel = block if rows is None else rows[block]
                # Fancy indexing copies, so the tensors are writable even when x / y are not.
                xb_all = torch.from_numpy(np.ascontiguousarray(x2d[sel], dtype=np.float32))
                yb_all = torch.from_numpy(y[sel].astype(np.int64, copy=False))
                if not on_cpu:  # the block's one upload
                    xb_all, yb_all = xb_all.to(dev), yb_all.to(dev)
                m = block.size
                for start in range(0, m, b):
                    xb = xb_all[start : start + b]
                    yb = yb_all[start : start + b]
                    if chain is not None:
                        with no_grad:
                            loss, grads = chain.loss_and_grads(xb, yb)
                            sgd.step(grads)
                    else:
                        for p in params_list:
                            p.grad = None
                        if objective is not None:  # the job method's local objective
                            loss = objective(module, xb, yb)
                        elif bf16:  # forward in autocast, loss in float32 from the logits (precision.py)
                            with autocast("bf16", dev):
                                logits = module(xb)
                            loss = F.cross_entropy(logits.float(), yb)
                        else:
                            loss = F.cross_entropy(module(xb), yb)
                        loss.backward()
                        with no_grad:
                            sgd.step([p.grad for p in params_list])
                    if kept is not None:
                        with no_grad:
                            self._flat[:frozen] = kept
                    if loss_acc is None:
                        loss_sum += loss.item()
                    else:
                        loss_acc += loss.detach().double()
                    steps += 1
                    samples += xb.shape[0]
        if loss_acc is not None:
            loss_sum = float(loss_acc.item())
        if opt_state is not None:
            sgd.save_state(opt_state, kept_on)
        if on_device:  # (the caller computes on with it there; nothing crosses)
            return self._flat.detach().clone(), {"loss": loss_sum / steps, "steps": steps, "samples": samples}
        flat_np = self._flat_np if on_cpu else download(self._flat)  # (a GPU's one download of the result)
        if out is None:
            result = flat_np.copy() if on_cpu else flat_np
        else:
            if out.shape != (self.num_params,) or out.dtype != np.float32:
                raise ValueError(f"out must be a float32 array of shape ({self.num_params},), got {out.shape} {out.dtype}")
            out[...] = flat_np
            result = out
        return result, {"loss": loss_sum / steps, "steps": steps, "samples": samples}

    def evaluate(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, batch_size: int | None = None) -> tuple[float, float]:
        """``(accuracy, mean cross-entropy loss)`` of the model with ``params`` on ``(x, y)``.

        Large batches (``batch_size``; default 4096 on CPU, 16384 on CUDA) under
        ``torch.inference_mode``, with the trainer's thread count, on the trainer's ``device``
        (CUDA: the parameters go up once into the trainer's module; the loss sum and the count of
        correct predictions are read back once). ``precision`` ``bf16``: the forward passes run
        under bfloat16 autocast, the loss is computed from float32 logits.
        """
        import torch
        import torch.nn.functional as F

        if batch_size is None:
            batch_size = 4096 if self.device == "cpu" else 16384
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        x2d, y = self._check_data(x, y)
        self._load(params)
        n = x2d.shape[0]
        module = self.module
        module.eval()
        loss_sum = 0.0
        correct = 0
        # bf16: the forward passes autocast, the logits come back as float32 (fp32: no region at all)
        cast = (lambda t: t) if self.precision == "fp32" else (lambda t: t.float())
        with torch.inference_mode(), autocast(self.precision, self.device):
            if self.device == "cpu":
                for start in range(0, n, batch_size):
                    xb = torch.from_numpy(np.array(x2d[start : start + batch_size], dtype=np.float32))
                    yb = torch.from_numpy(np.array(y[start : start + batch_size], dtype=np.int64))
                    logits = cast(module(xb))
                    loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
                    correct += int((logits.argmax(dim=1) == yb).sum().item())
            else:
                loss_t = torch.zeros((), dtype=torch.float64, device=self.device)
                correct_t = torch.zeros((), dtype=torch.int64, device=self.device)
                for start in range(0, n, batch_size):
                    xb = torch.from_numpy(np.array(x2d[start : start + batch_size], dtype=np.float32)).to(self.device)
                    yb = torch.from_numpy(np.array(y[start : start + batch_size], dtype=np.int64)).to(self.device)
                    logits = cast(module(xb))
                    loss_t += F.cross_entropy(logits, yb, reduction="sum").double()
                    correct_t += (logits.argmax(dim=1) == yb).sum()
                loss_sum, correct = float(loss_t.item()), int(correct_t.item())
        return correct / n, loss_sum / n
