"""FedDC's torch work: its drift and control math on the training device, with the bits of the numpy reference.

Gao et al., "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling and Correction", CVPR 2022;
the reference is :mod:`hierfl.methods.feddc.math` (:func:`~hierfl.methods.feddc.math.local_terms`,
:func:`~hierfl.methods.feddc.math.device_update`). Every operation is the reference's, element by element and
in its order, in float64 where it computes in float64: IEEE operations, each correctly rounded on any device,
so the bits are the numpy path's. Divisions by a scalar (``ω_i``, ``K̄·η_0``) divide by a float64 tensor on the
device (CUDA would multiply by a host scalar's reciprocal, which rounds differently); multiplications by a
scalar are single roundings on every device. torch is imported lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = ["local_terms_on_device", "device_update_on_device", "paper_upload_on_device"]


def _scalar(value: float, like: Any) -> Any:
    import torch

    return torch.tensor(float(value), dtype=torch.float64, device=like.device)


def local_terms_on_device(alpha: float, omega: float, c: Any, c_i: Any, h_i: Any) -> tuple[float, Any]:
    """``(α_i, α_i h_i + g_i)`` with ``α_i = α/ω_i`` and ``g_i = c/ω_i − c_i`` (float32 tensor)."""
    import torch

    if not omega > 0:
        raise ValueError(f"FedDC: a device's relative weight must be > 0, got {omega}")
    f64 = torch.float64
    alpha_i = alpha / omega
    g = c.to(f64) / _scalar(omega, c) - c_i.to(f64)
    return alpha_i, (h_i.to(f64) * alpha_i + g).to(torch.float32)


def device_update_on_device(h_i: Any, c_i: Any, c: Any, omega: float, start: Any, theta: Any, mean_steps: int,
                            lr: float) -> tuple[Any, Any, Any]:
    """``(h_i⁺, c_i⁺, δc_i)`` as float32 tensors: ``h_i⁺ = h_i + Δ``, ``c_i⁺ = c_i − c/ω_i − Δ/(K̄·η_0)``,
    ``δc_i = ω_i (c_i⁺ − c_i)`` with ``Δ = θ⁺ − w``. Raises for ``mean_steps < 1`` or ``lr <= 0``."""
    import torch

    if mean_steps < 1 or not lr > 0:
        raise ValueError(f"FedDC needs K̄ >= 1 and lr > 0, got K̄={mean_steps}, lr={lr}")
    f64, f32 = torch.float64, torch.float32
    delta = theta.to(f64) - start.to(f64)
    ci = c_i.to(f64)
    h_new = (h_i.to(f64) + delta).to(f32)
    c_new = (ci - c.to(f64) / _scalar(omega, ci) - delta / _scalar(mean_steps * lr, ci)).to(f32)
    dc = ((c_new.to(f64) - ci) * omega).to(f32)
    return h_new, c_new, dc


def paper_upload_on_device(theta: Any, h_new: Any) -> Any:
    """``θ⁺ + h_i⁺`` (float64 sum, rounded to float32): the upload of the paper's server rule."""
    import torch

    return (theta.to(torch.float64) + h_new.to(torch.float64)).to(torch.float32)
