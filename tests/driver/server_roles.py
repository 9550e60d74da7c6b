"""A cloud role with a logistic-regression model and a public split, and the shipped server tasks: shared by the
server-task tests (a module without tests, so importing it registers nothing twice)."""

from __future__ import annotations

import numpy as np

from hierfl.learn.server_tasks import SERVER_TASKS
from hierfl.runtime.roles import Cloud


def _cloud(public: bool = True) -> tuple[Cloud, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    from hierfl.learn.local import count_params, init_params
    from hierfl.models import LogRegConfig

    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    cfg = LogRegConfig()
    params = init_params(cfg, (4,), 2, 1)
    assert params.size == count_params(cfg, (4,), 2)
    spec = (cfg, (4,), 2, 1, False, "cpu", "fp32", "auto")
    return Cloud(params, x, y, spec, None, (x, y) if public else None), params, (x, y)


def _shipped_tasks() -> list[str]:
    from hierfl.learn.server_tasks import discover

    discover()
    return sorted(name for name, fn in SERVER_TASKS.items() if fn.__module__.startswith("hierfl."))
