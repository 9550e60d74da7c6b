"""Control variates on the training device: SCAFFOLD's ``c_i`` and FedDC's ``h_i``, ``c_i`` stay there between a
device's jobs, the round's server control and start model are uploaded once for the round's jobs, and the math
runs there in torch with the numpy reference's bits.

No GPU is needed: the device string ``cpu:0`` takes every branch a GPU takes, on CPU kernels (as in
``tests/learn/test_device_jobs.py``), so its results must be the CPU path's bits exactly. The crossings are counted
twice: by the host's transfer counter, and by spies on every copy a job alone makes between host and device (its
start model's upload, a correction's upload, its result's download), which also count the numpy runners' copies.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hierfl.driver import run_scenario
from hierfl.learn import local as local_module
from hierfl.learn import sgd as sgd_module
from hierfl.learn.kept import DeviceVectors, KeptTensor
from hierfl.methods.feddc.trainer import device_update_on_device, local_terms_on_device, paper_upload_on_device
from hierfl.methods.feddc.math import device_update, local_terms
from hierfl.methods.scaffold.trainer import correction_on_device, option2_on_device
from hierfl.methods.scaffold.math import correction, option2_control
from hierfl.runtime import device_host, local_executor
from tests.conftest import TINY, tiny
from tests.golden import contract_outputs

OFF_CPU = "cpu:0"


def _same(a: np.ndarray, b: Any) -> bool:
    b = b.numpy() if isinstance(b, torch.Tensor) else b
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_device_math_gives_the_numpy_bits() -> None:
    """SCAFFOLD's correction and option II, FedDC's local terms, drift update and paper upload: torch float64 on the
    device, element by element, bit-equal to the numpy reference on values over many magnitudes (subnormal to
    large, signed zeros)."""
    rng = np.random.default_rng(7)
    n = 4096

    def vec() -> np.ndarray:
        v = (rng.standard_normal(n) * 10.0 ** rng.integers(-40, 6, n)).astype(np.float32)
        v[:4] = [0.0, -0.0, 1e-45, -3e38]
        return v

    c, c_i, x, y, h = (vec() for _ in range(5))
    t = {k: torch.from_numpy(v) for k, v in dict(c=c, c_i=c_i, x=x, y=y, h=h).items()}
    assert _same(correction(c, c_i), correction_on_device(t["c"], t["c_i"]))
    for want, got in zip(option2_control(c_i, c, x, y, 7, 0.03), option2_on_device(t["c_i"], t["c"], t["x"], t["y"], 7, 0.03)):
        assert _same(want, got)
    a_want, corr_want = local_terms(0.3, 0.77, c, c_i, h)
    a_got, corr_got = local_terms_on_device(0.3, 0.77, t["c"], t["c_i"], t["h"])
    assert a_want == a_got and _same(corr_want, corr_got)
    want3 = device_update(h, c_i, c, 0.77, x, y, 13, 0.05)
    got3 = device_update_on_device(t["h"], t["c_i"], t["c"], 0.77, t["x"], t["y"], 13, 0.05)
    assert all(_same(w, g) for w, g in zip(want3, got3))
    with np.errstate(over="ignore"):  # (-3e38 twice: inf in both)
        assert _same((y.astype(np.float64) + want3[0].astype(np.float64)).astype(np.float32),
                     paper_upload_on_device(t["y"], got3[0]))
    with pytest.raises(ValueError, match="steps >= 1"):
        option2_on_device(t["c_i"], t["c"], t["x"], t["y"], 0, 0.03)


def test_device_vectors_upload_a_shared_vector_once_and_keep_state_there() -> None:
    """One upload per distinct shared vector (by identity), none for kept state or zeros; a host vector loaded
    into state (a resumed run) counts one upload; the result comes down in one counted call."""
    from hierfl.learn.staging import Staging

    dv = DeviceVectors(Staging(OFF_CPU))
    c = np.arange(5, dtype=np.float32)
    assert dv.shared(c) is dv.shared(c) and dv.transfers.h2d_models == 1
    assert dv.shared(c.copy()) is not dv.shared(c) and dv.transfers.h2d_models == 2
    zeros = dv.state(None, 5)
    kept = dv.keep(zeros + 1)
    assert dv.state(kept, 5) is kept.tensor and not zeros.any() and dv.transfers.h2d_models == 2
    assert np.array_equal(dv.state(c, 5).numpy(), c) and dv.transfers.h2d_models == 3
    out = np.empty(10, dtype=np.float32)
    assert dv.download([kept.tensor, dv.shared(c)], out) is out and np.array_equal(out, np.r_[np.ones(5), c])
    assert dv.transfers.as_dict() == {"h2d_calls": 3, "h2d_models": 3, "d2h_calls": 1, "d2h_models": 2}


class _Copies:
    """Spies on every model-sized copy a device host's job alone makes (not the cloud's evaluation)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts = {"h2d": 0, "d2h": 0}
        self.inside = False
        self.hosts: list[Any] = []
        load, download, put = local_module.LocalTrainer._load, local_module.download, sgd_module._set
        train, init = device_host.DeviceHost.train, local_executor.LocalExecutor.__init__
        spy = self

        def counted_load(trainer: Any, params: Any) -> None:
            if spy.inside and trainer.device != "cpu" and not isinstance(params, torch.Tensor):
                spy.counts["h2d"] += 1
            load(trainer, params)

        def counted_download(t: torch.Tensor) -> np.ndarray:
            if spy.inside:
                spy.counts["d2h"] += 1
            return download(t)

        def counted_set(buffer: torch.Tensor, values: np.ndarray) -> None:
            if spy.inside and not isinstance(values, torch.Tensor):  # (a host correction's upload; cpu:0: a write)
                spy.counts["h2d"] += 1
            put(buffer, values)

        def counted_train(host: Any, *a: Any, **kw: Any) -> Any:
            spy.inside = True
            try:
                return train(host, *a, **kw)
            finally:
                spy.inside = False

        def start(ex: Any, data: Any) -> None:
            init(ex, data)
            ex.host.staging.transfers.reset()  # (the warm-up job is start-up, not a round)
            spy.counts = {"h2d": 0, "d2h": 0}
            spy.hosts.append(ex.host)

        monkeypatch.setattr(local_module.LocalTrainer, "_load", counted_load)
        monkeypatch.setattr(local_module, "download", counted_download)
        monkeypatch.setattr(sgd_module, "_set", counted_set)
        monkeypatch.setattr(device_host.DeviceHost, "train", counted_train)
        monkeypatch.setattr(local_executor.LocalExecutor, "__init__", start)


SCAFFOLD = dict(training={"trainer": {"name": "scaffold"}}, stop={"rounds": 3})
FEDDC = dict(training={"trainer": {"name": "feddc", "alpha": 0.3}}, stop={"rounds": 3},
             protocol={"name": "fedavg", "fraction": 1.0, "weighting": "uniform"})


# (uploads, downloads) of a 4-device, 3-round run on the device: SCAFFOLD's rounds 2 and 3 start from the aggregate
# computed there (only c goes up); FedDC's server rule makes its model on the host (w and c go up each round); each
# round copies down the aggregate and the control sum Σ κ_i Δc_i, whatever the number of jobs
MOVED = {"scaffold": (1 + 1 + 1 + 1, 3 * 2), "feddc": (3 * 2, 3 * 2)}


@pytest.mark.parametrize("name, fields, k", [("scaffold", SCAFFOLD, 4), ("scaffold", SCAFFOLD, 8),
                                             ("feddc", FEDDC, 4)])
def test_control_state_stays_on_the_device_and_the_round_uploads_once(name: str, fields: dict, k: int, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4-device, 3-round run on ``cpu:0``: the contract outputs are the CPU run's bytes. Each round uploads at most
    its start model and control, once, the results ``[y; Δc]`` stay on the device where the aggregator folds the
    models and sums the controls, and it downloads the aggregate and the control sum: 10 (SCAFFOLD) or 12 (FedDC)
    copies in all, where the numpy path (forced on the same device) makes 36 (per job: the start model and the
    correction up, the model down). With 8 devices the device path's counts are the same; the numpy path's double.
    The kept vectors are :class:`KeptTensor` on the device."""
    fields = {**fields, "devices": {"count": k}}
    run_scenario(tiny(**fields), tmp_path / "cpu")
    monkeypatch.setattr("hierfl.runtime.device_host.resolve_device", lambda d: OFF_CPU)
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: OFF_CPU)
    copies = _Copies(monkeypatch)
    run_scenario(tiny(**fields), tmp_path / "dev")
    host = copies.hosts[-1]
    moved = host.staging.transfers.as_dict()
    up, down = MOVED[name]
    assert moved == {"h2d_calls": up, "h2d_models": up, "d2h_calls": down, "d2h_models": down}
    assert copies.counts == {"h2d": 0, "d2h": 0}  # (no copy of the trainer's own: all through the counter)
    kept = host.states.vectors
    assert sorted(kept) == list(range(k))
    assert all(isinstance(v, KeptTensor) for vecs in kept.values() for v in vecs.values())
    a, b = contract_outputs(tmp_path / "cpu"), contract_outputs(tmp_path / "dev")
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
    assert np.array_equal(np.load(tmp_path / "cpu" / "final_model.npy"), np.load(tmp_path / "dev" / "final_model.npy"))
    # before: the numpy runner on the same device (its copies are the trainer's, uncounted by the counter)
    monkeypatch.setattr(DeviceVectors, "on_host", property(lambda self: True))
    run_scenario(tiny(**fields), tmp_path / "numpy")
    assert copies.counts == {"h2d": 2 * 3 * k, "d2h": 3 * k}  # 3k jobs × (start model + correction up, model down)
    assert contract_outputs(tmp_path / "numpy") == a


HIER = {"protocol": {"name": "hierfavg", "kappa2": 2, "fraction": 1.0}, "topology": {"edge_servers": 2},
        "stop": {"rounds": 1}}


@pytest.mark.parametrize("trainer", [{"name": "scaffold"}, {"name": "feddc", "alpha": 0.3, "control_scope": "edge"},
                                     {"name": "feddc", "alpha": 0.3, "control_scope": "cloud"}],
                         ids=["scaffold", "feddc-edge", "feddc-cloud"])
def test_hierarchical_controls_on_the_device_give_the_cpu_bits(trainer: dict, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """HierFAVG with 2 edges on ``cpu:0``: SCAFFOLD's edges relay ``Σ κ_i Δc_i`` (summed on the device, packed on
    the host), FedDC's edges keep their own ``c_e`` or relay the cloud's; the contract outputs are the CPU run's."""
    raw = copy.deepcopy(HIER)
    raw["training"] = {"epochs": 1, "batch_size": 20, "lr": 0.1, "trainer": trainer}
    if trainer["name"] == "feddc":
        raw["protocol"]["weighting"] = "uniform"
    run_scenario(tiny(**raw), tmp_path / "cpu")
    monkeypatch.setattr("hierfl.runtime.device_host.resolve_device", lambda d: OFF_CPU)
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: OFF_CPU)
    copies = _Copies(monkeypatch)
    run_scenario(tiny(**raw), tmp_path / "dev")
    assert all(isinstance(v, KeptTensor) for vecs in copies.hosts[-1].states.vectors.values() for v in vecs.values())
    a, b = contract_outputs(tmp_path / "cpu"), contract_outputs(tmp_path / "dev")
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
    assert np.array_equal(np.load(tmp_path / "cpu" / "final_model.npy"), np.load(tmp_path / "dev" / "final_model.npy"))


def test_a_resumed_run_on_the_device_gives_the_uninterrupted_bits(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """SCAFFOLD on ``cpu:0`` with a checkpoint every round, Ctrl-C in round 2, resume: the uninterrupted run's files.
    The checkpoint holds each device's ``c_i`` as a host vector (its device copy read once for it); the resumed
    host loads each back onto the device on the device's first job (one counted upload each) and keeps it there."""
    from hierfl.driver.checkpoint import load_checkpoint
    from tests.driver.test_recovery import assert_resumes_as_uninterrupted

    monkeypatch.setattr("hierfl.runtime.device_host.resolve_device", lambda d: OFF_CPU)
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: OFF_CPU)
    raw = copy.deepcopy(TINY)
    raw.update(training={**raw["training"], "trainer": {"name": "scaffold"}}, stop={"rounds": 3},
               runtime={"executor": "local", "checkpoint": {"every_cloud_aggregations": 1}})
    held: list[Any] = []

    def spy(path: Any) -> Any:
        held.append(load_checkpoint(path))
        return held[-1]

    copies = _Copies(monkeypatch)
    monkeypatch.setattr("hierfl.driver.checkpoint.load_checkpoint", spy)
    assert_resumes_as_uninterrupted(tmp_path, raw)
    states = held[0].roles["hosts"]
    assert sorted(states) == [0, 1, 2, 3] and all(type(v["c"]) is np.ndarray and v["c"].any() for v in states.values())
    # the resumed run (the third host) goes on from round 1's checkpoint: round 2 uploads its start model and control,
    # round 3 its control (it starts from round 2's aggregate, on the device), each device's c_i goes up once
    # (3 + 4); down: two rounds' aggregate and control sum, and the round-2 checkpoint's reading of the 4 c_i (the
    # completed run writes none after round 3)
    resumed = copies.hosts[2]
    assert resumed.staging.transfers.as_dict() == {"h2d_calls": 7, "h2d_models": 7, "d2h_calls": 8, "d2h_models": 8}
    assert all(isinstance(v["c"], KeptTensor) for v in resumed.states.vectors.values())
