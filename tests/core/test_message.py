"""Message layouts (hierfl.core.message): parts by name, their widths and bytes, packing and unpacking."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.message import CONTROLLED, MODEL, MODEL_ONLY, MessageLayout, Part


def test_model_only_is_the_model():
    assert MODEL_ONLY.names == (MODEL,)
    assert not MODEL_ONLY.extra
    assert MODEL_ONLY.width(7) == 7
    assert MODEL_ONLY.nbytes(7) == 28  # float32


def test_controlled_carries_a_model_sized_control_summed_apart():
    assert CONTROLLED.names == (MODEL, "control")
    assert CONTROLLED.part("control").combine == "coef"
    assert CONTROLLED.width(5) == 10
    assert CONTROLLED.nbytes(5) == 40
    v = np.arange(10, dtype=np.float32)
    parts = CONTROLLED.split(v)
    np.testing.assert_array_equal(parts[MODEL], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(parts["control"], [5, 6, 7, 8, 9])
    assert np.shares_memory(parts["control"], v)  # views, no copy
    np.testing.assert_array_equal(CONTROLLED.join(parts), v)


def test_fixed_length_parts_and_their_own_itemsize():
    layout = MessageLayout((Part(MODEL), Part("offset", length=3), Part("counts", length=4, itemsize=2)))
    assert layout.width(10) == 17
    assert layout.nbytes(10) == 4 * 10 + 4 * 3 + 2 * 4
    assert layout.num_params_of(17) == 10
    assert layout.slices(10) == {MODEL: slice(0, 10), "offset": slice(10, 13), "counts": slice(13, 17)}
    out = np.zeros(17, dtype=np.float32)
    got = layout.join({MODEL: np.ones(10), "offset": np.full(3, 2.0), "counts": np.full(4, 3.0)}, out=out)
    assert got is out
    assert out.tolist() == [1.0] * 10 + [2.0] * 3 + [3.0] * 4


def test_join_and_split_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="missing"):
        CONTROLLED.join({MODEL: np.zeros(3)})
    with pytest.raises(ValueError, match="'control' has 2 values, the layout wants 3"):
        CONTROLLED.join({MODEL: np.zeros(3), "control": np.zeros(2)})
    with pytest.raises(ValueError, match="not a message of parts model, control"):
        CONTROLLED.split(np.zeros(7))
    with pytest.raises(KeyError, match="no message part 'nope'"):
        CONTROLLED.part("nope")


@pytest.mark.parametrize("parts, message", [
    ((), "starts with the model"),
    ((Part("control"), Part(MODEL)), "starts with the model"),
    ((Part(MODEL), Part("x"), Part("x")), "unique"),
])
def test_bad_layouts(parts, message):
    with pytest.raises(ValueError, match=message):
        MessageLayout(parts)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "not a name"}, "identifier"), ({"name": "x", "length": -1}, "length"),
    ({"name": "x", "itemsize": 0}, "itemsize"), ({"name": "x", "combine": "max"}, "combine"),
])
def test_bad_parts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Part(**kwargs)


def test_trainers_size_their_messages_from_their_layout():
    """SCAFFOLD and FedDC messages are twice the model (model and control, both ways); Meta-SGD's carries the
    step sizes after θ; plain SGD's is the model."""
    from hierfl.learn.trainers import TRAINERS
    import hierfl.methods  # noqa: F401  (registers the shipped trainers)

    assert TRAINERS.get("sgd")().layout.nbytes(100) == 400
    for name in ("scaffold", "feddc"):
        cfg = TRAINERS.get(name)()
        assert cfg.layout == CONTROLLED and cfg.layout.nbytes(100) == 800
        job = cfg.spec_fields()["method"]
        assert type(job).layout == CONTROLLED
        assert job.result_width(100, 10, 64) == 200
    assert TRAINERS.get("fedmeta")(learner="meta_sgd").layout.names == (MODEL, "step_sizes")
    assert TRAINERS.get("fedmeta")(learner="maml").layout == MODEL_ONLY


BAD_TRAINER = '''
from typing import ClassVar, Literal
from hierfl.plugin import TRAINERS, TrainerConfig


@TRAINERS.register
class ForgetsTheControl(TrainerConfig):
    """Needs control variates but declares messages of the model alone."""

    name: Literal["forgets_control"] = "forgets_control"
    needs_control_variates: ClassVar[bool] = True
'''


def test_a_trainer_whose_messages_miss_the_control_is_refused(tmp_path, capsys):
    """A plug-in trainer that needs control variates but declares model-only messages would move vectors twice as
    long as the bytes it charges: the loader refuses it at ``training.trainer`` (exit 2, no traceback)."""
    import yaml

    from hierfl.cli import main
    from tests.conftest import TINY

    plugin = tmp_path / "bad_trainer.py"
    plugin.write_text(BAD_TRAINER, encoding="utf-8")
    scen = tmp_path / "s.yaml"
    raw = {**TINY, "protocol": {"name": "fedavg"}, "training": {**TINY.get("training", {}), "trainer": "forgets_control"}}
    scen.write_text(yaml.safe_dump(raw), encoding="utf-8")
    code = main(["validate", str(scen), "--plugin", str(plugin)])
    err = capsys.readouterr().err
    assert code == 2
    assert "training.trainer: forgets_control needs control variates" in err
    assert "it declares parts model" in err and "Traceback" not in err
