"""Tier aggregators (hierfl/driver/tiers.py): stacks composed once from the scenario, and a new
cross-cutting aggregation feature added as one wrapper class, with no protocol or driver edit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hierfl.driver.tiers as agg
from hierfl.driver import run_scenario
from hierfl.driver.tiers import AsyncScreen, Plain, RobustQueue, ServerOptimizer, Wrapper
from tests.conftest import tiny


def fedbuff(**kw: Any):  # noqa: ANN201
    return tiny(devices={"count": 6, "speed_sps": {"dist": "uniform", "low": 50, "high": 200}},
                data={"dataset": {"num_samples": 360}}, protocol={"name": "fedbuff", "K": 3, "concurrency": 4},
                training={"epochs": 1}, stop={"rounds": 6}, **kw)


def fedasync(**kw: Any):  # noqa: ANN201
    return tiny(devices={"count": 6, "speed_sps": {"dist": "uniform", "low": 50, "high": 200}},
                data={"dataset": {"num_samples": 360}}, protocol={"name": "fedasync", "concurrency": 4},
                training={"epochs": 1}, stop={"rounds": 8}, **kw)


def _stack(sc: Any, tier: str, tmp_path: Path) -> list[type]:
    """The layer classes of ``tier``'s stack in a run of ``sc``, outermost first."""
    seen: list[list[type]] = []
    real = agg.compose

    def spy(ctx: Any, t: str) -> Any:
        layer = real(ctx, t)
        if t == tier:
            chain, node = [], layer
            while True:
                chain.append(type(node))
                if not isinstance(node, Wrapper):
                    break
                node = node.inner
            seen.append(chain)
        return layer

    agg.compose = spy
    try:
        import hierfl.driver.aggregation as service

        service.compose = spy
        run_scenario(sc, tmp_path)
    finally:
        agg.compose = real
        service.compose = real
    assert seen, f"no {tier} stack was composed"
    return seen[0]


def test_a_plain_run_steps_with_the_plain_combination(tmp_path):
    assert _stack(fedbuff(), "cloud", tmp_path) == [Plain]


def test_a_server_optimizer_is_the_bottom_layer(tmp_path):
    sc = fedbuff(server_optimizer={"cloud": {"name": "fedadam", "lr": 0.01}})
    assert _stack(sc, "cloud", tmp_path) == [ServerOptimizer]


def test_a_robust_rule_over_a_queue_wraps_the_server_optimizer(tmp_path):
    sc = fedbuff(aggregation={"cloud": {"name": "trimmed_mean", "beta": 0.2}},
                 server_optimizer={"cloud": {"name": "fedadam", "lr": 0.01}})
    assert _stack(sc, "cloud", tmp_path) == [RobustQueue, ServerOptimizer]


def test_an_asynchronous_screen_wraps_the_step_it_screens(tmp_path):
    sc = fedasync(aggregation={"cloud": {"name": "zeno_pp"}})
    assert _stack(sc, "cloud", tmp_path) == [AsyncScreen, Plain]


class HalfStep(Wrapper):
    """A test-only feature: every cloud step moves half as far (a stand-in for DP noise or compression)."""

    name = "half_step"
    rank = 30
    calls = 0

    @classmethod
    def applies(cls, ctx: Any, tier: str) -> bool:
        return tier == "cloud"

    def step(self, entity: int, base: Any, deltas: list, sources: list[int]) -> Any:
        type(self).calls += 1
        return self.inner.step(entity, base, [(0.5 * c, a, b) for c, a, b in deltas], sources)


def _emulation(run_dir: Path) -> list[dict]:
    lines = [json.loads(s) for s in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("wall_s", "startup_s", "accuracy", "loss")} for r in lines]


@pytest.mark.parametrize("make", [fedbuff, fedasync], ids=["fedbuff", "fedasync"])
def test_a_new_wrapper_is_one_class_and_a_registration(make, tmp_path, monkeypatch):
    base = run_scenario(make(), tmp_path / "base")
    monkeypatch.setitem(agg.WRAPPERS, HalfStep.name, HalfStep)
    HalfStep.calls = 0
    wrapped = run_scenario(make(), tmp_path / "wrapped")
    aggregations = int(wrapped.summary["totals"]["cloud_aggregations"])
    assert HalfStep.calls == aggregations > 0  # every cloud step went through it
    assert not np.array_equal(base.final_params, wrapped.final_params)  # and it changed the model ...
    assert _emulation(tmp_path / "base") == _emulation(tmp_path / "wrapped")  # ... never the emulation


def test_register_wrapper_refuses_a_nameless_or_duplicate_wrapper():
    class Nameless(Wrapper):
        pass

    with pytest.raises(TypeError, match="needs a `name`"):
        agg.register_wrapper(Nameless)

    class Other(Wrapper):
        name = "robust_queue"

    with pytest.raises(ValueError, match="already registered"):
        agg.register_wrapper(Other)


def test_every_registered_wrapper_conforms():
    assert {"robust_queue", "async_screen"} <= set(agg.WRAPPERS)
    for name, cls in agg.WRAPPERS.items():
        assert cls.name == name and issubclass(cls, Wrapper)
        assert cls.__doc__ and cls.__doc__.strip(), f"{name}: no docstring"
        assert "applies" in vars(cls) and "step" in vars(cls), f"{name}: must define applies and step"
        assert isinstance(cls.rank, int)


def test_protocols_use_only_the_tier_interface_to_aggregate():
    # the aggregation members the Env had before tier aggregators are gone from every protocol
    old = ("add_to_edge", "commit_edge", "edge_aggregated", "discard_edge", "add_to_cloud", "commit_cloud",
           "robust_combine", "robust_average", "server_step", "server_optimizer", "record_async_aggregation",
           "drop_update", "screen_update")
    root = Path(__file__).resolve().parents[2] / "hierfl" / "protocols"
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for name in old:
            assert f"env.{name}(" not in text, f"{path.name} calls env.{name}"
