"""The scenario reference says what the code does: defaults of partial sections, and what stop keys do.

The reference (``docs/reference/generated/scenario.md``) shows each section's default and each
key's description, both read from the pydantic models; these tests hold the models to them.
"""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from hierfl.driver import run_scenario
from hierfl.scenario.loader import validate_raw
from hierfl.scenario.schema import EvaluationConfig, Scenario, StopConfig
from tests.conftest import TINY


def _model(t: typing.Any) -> type[BaseModel] | None:
    while typing.get_origin(t) is typing.Annotated:
        t = typing.get_args(t)[0]
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


def _sections(model: type[BaseModel], path: str = "", seen: set[type] | None = None):
    """(key path, field, section class) of every section with a model instance as its default."""
    seen = set() if seen is None else seen
    if model in seen:
        return
    seen.add(model)
    for name, f in model.model_fields.items():
        cls = _model(f.annotation)
        if cls is not None and f.default is not PydanticUndefined and isinstance(f.default, BaseModel):
            yield f"{path}{name}", f, cls
        for arg in (f.annotation, *typing.get_args(f.annotation)):
            sub = _model(arg)
            if sub is not None:
                yield from _sections(sub, f"{path}{name}.", seen)


def test_an_empty_section_is_the_documented_default():
    # `servers: {edge: {}}` must mean what leaving `edge` out means: the default the reference shows
    sections = list(_sections(Scenario))
    assert any(path == "servers.edge" for path, _, _ in sections)
    wrong = [f"{path}: documented default {f.default!r}, but {{}} gives {cls()!r}"
             for path, f, cls in sections if cls() != f.default]
    assert not wrong, "\n".join(wrong)


def test_partial_servers_keep_their_tiers():
    base = {**TINY, "stop": {"rounds": 1}}
    sc = validate_raw({**base, "servers": {"edge": {}}})
    assert sc.servers.edge.tier == "edge_cpu" and sc.servers.cloud.tier == "cloud_gpu"
    sc = validate_raw({**base, "servers": {"cloud": {"gflops": 100.0}}})
    assert sc.servers.edge.tier == "edge_cpu" and sc.servers.cloud.flops_per_s == 100e9
    sc = validate_raw({**base, "servers": {"edge": {"tier": "edge_gpu"}, "cloud": {}}})
    assert sc.servers.edge.tier == "edge_gpu" and sc.servers.cloud.tier == "cloud_gpu"


def test_target_accuracy_keys_say_which_one_stops_the_run(tmp_path: Path):
    stop = StopConfig.model_fields["target_accuracy"].description or ""
    measure = EvaluationConfig.model_fields["target_accuracy"].description or ""
    assert "stop" in stop and "time_to_target_s" in measure and "stop.target_accuracy" in measure
    # and they do: stop.target_accuracy ends the run at the first evaluation that reaches it
    raw = {**TINY, "stop": {"rounds": 50, "target_accuracy": 0.01}, "evaluation": {"every_s": 1.0}}
    result = run_scenario(validate_raw(raw), tmp_path / "stopped")
    assert result.summary["stop_reason"] == "target_accuracy" and result.summary["rounds"] < 50
    # evaluation.target_accuracy alone measures the time to it and lets the run go on
    raw = {**TINY, "stop": {"rounds": 3}, "evaluation": {"every_s": 1.0, "target_accuracy": 0.01}}
    result = run_scenario(validate_raw(raw), tmp_path / "measured")
    assert result.summary["stop_reason"] == "rounds" and result.summary["time_to_target_s"] is not None
