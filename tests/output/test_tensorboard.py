"""output.tensorboard: the eval lines as TensorBoard scalars (read back with TensorBoard's own reader)."""

from __future__ import annotations

import json

import pytest

import hierfl
from hierfl.config.errors import ConfigError
from hierfl.protocols import PROTOCOLS
from tests.conftest import TINY

pytest.importorskip("tensorboard")


def _scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return {tag: [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_scalars_equal_the_eval_lines(tmp_path):
    proto = {**PROTOCOLS.example("fedbuff").model_dump(mode="json"), "K": 2}
    r = hierfl.run({**TINY, "protocol": proto, "stop": {"virtual_time_s": 20}},
                   overrides=["output.tensorboard=true", "evaluation.every_s=2"], out=tmp_path / "run")
    evals = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["event"] == "eval"]
    tags = _scalars(tmp_path / "run")
    keys = {"accuracy", "loss"} | {k for k in evals[-1] if k.startswith(("staleness_mean_", "queue_len_"))}
    assert any(k.startswith("queue_len_") for k in keys) and any(k.startswith("staleness_mean_") for k in keys)
    assert set(tags) == {f"{axis}/{k}" for axis in ("by_round", "by_time") for k in keys}
    for key in ("accuracy", "loss"):
        assert [s for s, _, _ in tags[f"by_time/{key}"]] == [round(e["t"] * 1000) for e in evals]
        assert [v for _, _, v in tags[f"by_time/{key}"]] == pytest.approx([e[key] for e in evals], rel=1e-6)
        assert [s for s, _, _ in tags[f"by_round/{key}"]] == [e["round"] for e in evals]
        assert [w for _, w, _ in tags[f"by_round/{key}"]] == pytest.approx([e["t"] for e in evals])
    assert r.summary["final_accuracy"] == pytest.approx(tags["by_round/accuracy"][-1][2], rel=1e-6)


def test_tensorboard_off_by_default_and_a_bad_value_is_a_config_error(tmp_path):
    hierfl.run(TINY, out=tmp_path / "run")
    assert not (tmp_path / "run" / "tensorboard").exists()
    with pytest.raises(ConfigError, match="output.tensorboard"):
        hierfl.run(TINY, overrides=["output.tensorboard=maybe"])
