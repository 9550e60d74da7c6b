"""SCAFFOLD's torch work: its control math on the training device, with the bits of the numpy reference.

Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning", ICML 2020, option II;
the reference is :mod:`hierfl.methods.scaffold.math`. Every operation below is the reference's, element by
element and in its order: float32 inputs widened to float64 (exact), one IEEE subtraction, addition or division
per step (each correctly rounded on any device), the result rounded to float32. A division by the scalar
``K·η_l`` is a division by a float64 tensor on the device: CUDA would turn a division by a host scalar into a
multiplication by its reciprocal, which rounds differently. So the device path gives the numpy path's bits
(``tests/learn/test_device_controls.py`` holds it to them). torch is imported lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = ["correction_on_device", "option2_on_device"]


def correction_on_device(c: Any, c_i: Any) -> Any:
    """``c − c_i`` in float64, rounded to float32 (:func:`~hierfl.methods.scaffold.math.correction`)."""
    import torch

    return (c.to(torch.float64) - c_i.to(torch.float64)).to(torch.float32)


def option2_on_device(c_i: Any, c: Any, x: Any, y: Any, steps: int, lr: float) -> tuple[Any, Any]:
    """``(c_i⁺, Δc_i)`` of option II as float32 tensors (:func:`~hierfl.methods.scaffold.math.option2_control`):
    ``c_i⁺ = c_i − c + (x − y)/(K·η_l)``, ``Δc_i = c_i⁺ − c_i``. Raises ``ValueError`` for ``steps < 1`` or
    ``lr <= 0``."""
    import torch

    if steps < 1 or not lr > 0:
        raise ValueError(f"option II needs steps >= 1 and lr > 0, got steps={steps}, lr={lr}")
    f64 = torch.float64
    ci = c_i.to(f64)
    scale = torch.tensor(steps * lr, dtype=f64, device=ci.device)  # (the reference's float64 product K·η_l)
    new = (ci - c.to(f64) + (x.to(f64) - y.to(f64)) / scale).to(torch.float32)
    return new, (new.to(f64) - ci).to(torch.float32)
