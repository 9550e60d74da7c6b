"""A fast-path group's results stay on the training device and are aggregated there (hierfl.learn.staging);
the group cap comes from the device's total memory (hierfl.learn.group_cap).

* :class:`~hierfl.learn.device_sum.DeviceWeightedSum` gives the numpy reference's bits
  (:class:`~hierfl.core.aggregate.WeightedSum`): whole vectors and block-folded ones, fractional weights,
  the deferred same-object case, host vectors among device rows;
* real FedAvg and HierFAVG runs (a tiny model, K = 4 and K = 8 devices) make a number of model-sized
  host↔device transfers per round that does not grow with K: one upload of the initial model, one
  download per global aggregate (HierFAVG's edge aggregates stay on the device, whatever the edges);
* the resolved cap is the formula's for a given memory size, recorded in ``config.yaml``; set by hand it
  caps the groups; set without the fast path it is refused.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import yaml

from hierfl.core.aggregate import WeightedSum
from hierfl.learn import group_cap
from hierfl.learn.device_sum import DeviceWeightedSum
from hierfl.learn.staging import DeviceStack, Staging
from tests.conftest import tiny


def _stack(rows: np.ndarray) -> tuple[DeviceStack, Staging]:
    import torch

    staging = Staging("cpu")
    held = rows.copy()  # (as a CPU host's group: the stacked tensor is its result rows' memory)
    return DeviceStack(torch.from_numpy(held), staging, host=held), staging


@pytest.mark.parametrize("kernel", ["torch", "numpy"])  # torch: what a GPU runs; numpy: a CPU device's default
@pytest.mark.parametrize("size", [37, (1 << 15) + 1001])  # one whole fold; the reference folds this one by blocks
def test_the_device_sum_has_the_numpy_references_bits(size, kernel):
    rng = np.random.default_rng(size)
    rows = (rng.normal(size=(5, size)) * rng.uniform(1e-3, 1e3, size=(5, 1))).astype(np.float32)
    weights = [37.0, 0.1, 1e-3, 12.5, 3.3]
    stack, staging = _stack(rows)
    dev, ref = DeviceWeightedSum(staging, kernel), WeightedSum()
    for k, w in enumerate(weights):
        dev.add(stack.row(k), w)
        ref.add(rows[k], w)
    got, want = dev.result(), ref.result()
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    assert dev.count == 5 and dev.total_weight == ref.total_weight and dev.folds == 5
    # a checkpoint of a running sum (deep-copied, pickled) goes on with the same bits
    part = DeviceWeightedSum(staging, kernel)
    for k in range(3):
        part.add(stack.row(k), weights[k])
    part = pickle.loads(pickle.dumps(part))
    for k in range(3, 5):
        part.add(stack.row(k), weights[k])
    assert part.result().tobytes() == want.tobytes()
    staging.transfers.reset()
    dev = DeviceWeightedSum(staging, kernel)
    for k, w in enumerate(weights):
        dev.add(stack.row(k), w)
    dev.result()
    # nothing crossed but the one aggregate: no row was copied to the host
    assert staging.transfers == {"h2d_calls": 0, "h2d_models": 0, "d2h_calls": 1, "d2h_models": 1}


def test_one_row_added_again_and_again_and_host_vectors_among_rows_keep_the_reference():
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(3, 50)).astype(np.float32)
    stack, staging = _stack(rows)
    same = DeviceWeightedSum(staging, "torch")
    row = stack.row(1)
    for w in (2.0, 3.0, 0.5):
        same.add(row, w)
    ref = WeightedSum()
    for w in (2.0, 3.0, 0.5):
        ref.add(rows[1], w)
    assert same.folds == 0 and same.result().tobytes() == ref.result().tobytes() == rows[1].tobytes()
    mixed, ref = DeviceWeightedSum(staging, "torch"), WeightedSum()
    host = rng.normal(size=50).astype(np.float32)
    for vec, ref_vec, w in ((stack.row(0), rows[0], 1.5), (host, host, 2.25), (stack.row(2), rows[2], 0.75)):
        mixed.add(vec, w)
        ref.add(ref_vec, w)
    assert mixed.result().tobytes() == ref.result().tobytes()
    with pytest.raises(ValueError, match="weights sum to zero"):
        empty = DeviceWeightedSum(staging, "torch")
        empty.add(stack.row(0), 0.0)
        empty.result()


def test_a_row_used_on_the_host_is_copied_once_and_pickles_as_its_host_copy():
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    stack, staging = _stack(rows)
    row = stack.row(2)
    first = np.asarray(row)
    assert first is row.host() and first.tobytes() == rows[2].tobytes()
    assert staging.transfers.d2h_calls == 1  # (the second use sees the same copy)
    back = pickle.loads(pickle.dumps(row))
    assert isinstance(back, np.ndarray) and back.tobytes() == rows[2].tobytes()


@pytest.mark.parametrize("kernel", ["torch", "numpy"])
def test_an_aggregate_left_on_the_device_has_the_host_bits_and_is_trained_from_there(kernel):
    """An edge's aggregate kept on the device (DeviceModel): the bits of result(), no crossing until a host use
    (then one, and that copy every later use), a group starting from it uploads nothing, and it pickles as its
    host copy."""
    from hierfl.learn.staging import DeviceModel, stage_starts

    rng = np.random.default_rng(3)
    rows = rng.normal(size=(4, 40)).astype(np.float32)
    stack, staging = _stack(rows)
    sums = [DeviceWeightedSum(staging, kernel) for _ in range(2)]
    for k, w in enumerate((2.0, 0.5, 7.0, 1.25)):
        for acc in sums:
            acc.add(stack.row(k), w)
    staging.transfers.reset()
    kept = sums[0].result_resident()
    assert isinstance(kept, DeviceModel) and staging.transfers.d2h_calls == 0
    want = sums[1].result()
    staging.transfers.reset()
    starts = stage_starts([kept, kept, kept], 40, staging)
    assert staging.transfers.h2d_calls == 0 and starts.numpy().tobytes() == np.tile(want, (3, 1)).tobytes()
    # the cloud folds it where it is: the same bits as the host sum of the host copies
    cloud, ref = DeviceWeightedSum(staging, kernel), WeightedSum()
    cloud.add(kept, 3.0)
    cloud.add(stack.row(0), 1.0)
    ref.add(want, 3.0)
    ref.add(rows[0], 1.0)
    assert cloud.result().tobytes() == ref.result().tobytes() and staging.transfers.h2d_calls == 0
    staging.transfers.reset()
    first = np.asarray(kept)
    assert first is kept.host() and first.tobytes() == want.tobytes() and staging.transfers.d2h_calls == 1
    back = pickle.loads(pickle.dumps(kept))
    assert isinstance(back, np.ndarray) and back.tobytes() == want.tobytes()


def _transfers(monkeypatch, scenario, tmp_path):
    """The device host's transfers during ``scenario``'s rounds (after the executor's start and warm-up)."""
    from hierfl.driver import run_scenario
    from hierfl.runtime import local_executor

    hosts = []
    start = local_executor.LocalExecutor.__init__

    def counted(self, data):
        start(self, data)
        self.host.staging.transfers.reset()  # (the warm-up's throw-away group is start-up, not a round)
        hosts.append(self.host)

    monkeypatch.setattr(local_executor.LocalExecutor, "__init__", counted)
    result = run_scenario(scenario, tmp_path)
    assert result.summary["rounds"] == 3 and len(hosts) == 1
    return hosts[0].staging.transfers.as_dict()


@pytest.mark.parametrize("k", [4, 8])
def test_transfers_per_round_do_not_grow_with_the_number_of_jobs(k, monkeypatch, tmp_path):
    fedavg = _transfers(monkeypatch, tiny(devices={"count": k}, runtime={"fast_path": True}), tmp_path / "fedavg")
    # the initial model up once; each round's aggregate down once, and its device copy is where the next round
    # starts from (3 rounds)
    assert fedavg == {"h2d_calls": 1, "h2d_models": 1, "d2h_calls": 3, "d2h_models": 3}
    for edges, kappa2 in ((2, 1), (4, 2)):
        hier = _transfers(monkeypatch, tiny(devices={"count": 2 * k}, protocol={"name": "hierfavg", "kappa2": kappa2},
                                            topology={"edge_servers": edges}, runtime={"fast_path": True}),
                          tmp_path / f"hier{edges}")
        # the edge aggregates stay on the device (the next edge round trains from them, the cloud averages them
        # there): the initial model up once, and a cloud round's global model down once, whatever the edges
        assert hier == {"h2d_calls": 1, "h2d_models": 1, "d2h_calls": 3, "d2h_models": 3}


def test_the_resolved_cap_is_the_formulas_and_is_recorded(tmp_path, monkeypatch):
    from hierfl.core.work import TrainSpec
    from hierfl.driver import run_scenario
    from hierfl.models import LogRegConfig, MLPConfig

    spec = TrainSpec(epochs=1, batch_size=8, lr=0.1, momentum=0.9)
    cfg = MLPConfig(hidden=[16])
    # one sample: 5 inputs, then Linear 16, ReLU 16, Linear 3 → 40 floats; P = 5·16+16 + 16·3+3 = 147; momentum: 1 slot
    assert group_cap.activation_floats(cfg, (5,), 3) == 5 + 16 + 16 + 3
    per_job = 4 * (147 * (3 + 1) + 2 * 8 * 40)
    got = group_cap.resolve_group_cap(cfg, (5,), 3, 147, 8, spec, "cpu", memory=2 * 10 * per_job + 7)
    assert got == {"group_max": 10, "memory_bytes": 2 * 10 * per_job + 7, "job_bytes": per_job}
    assert group_cap.cap_for(10**15, per_job) == 10**15 // 2 // per_job and group_cap.cap_for(1, per_job) == 1
    # a run records the cap resolved from this machine's total memory (the tiny model: far above any round)
    run_scenario(tiny(runtime={"fast_path": True}, stop={"rounds": 1}), tmp_path / "auto")
    recorded = yaml.safe_load((tmp_path / "auto" / "config.yaml").read_text())["runtime"]["group_max"]
    # (tiny: logreg on 5 features and 3 classes, P = 18; batch 10; plain SGD: no optimizer slot)
    tiny_job = group_cap.job_bytes(18, 10, group_cap.activation_floats(LogRegConfig(), (5,), 3), 0)
    assert recorded == group_cap.cap_for(group_cap.total_memory("cpu"), tiny_job)
    # and a small device's memory gives small groups, recorded as well
    monkeypatch.setattr(group_cap, "total_memory", lambda device: 2 * 3 * tiny_job)
    run_scenario(tiny(runtime={"fast_path": True}, stop={"rounds": 1}), tmp_path / "small")
    assert yaml.safe_load((tmp_path / "small" / "config.yaml").read_text())["runtime"]["group_max"] == 3


def test_a_set_cap_caps_the_groups_and_needs_the_fast_path(tmp_path, monkeypatch):
    from hierfl.config.errors import ConfigError
    from hierfl.runtime.device_host import DeviceHost

    sizes = []
    group = DeviceHost.train_group_resident

    def spy(self, devices, *args, **kw):
        sizes.append(len(devices))
        return group(self, devices, *args, **kw)

    monkeypatch.setattr(DeviceHost, "train_group_resident", spy)
    moved = _transfers(monkeypatch, tiny(devices={"count": 8}, runtime={"fast_path": True, "group_max": 3}),
                       tmp_path / "capped")
    assert sizes == [3, 3, 2] * 3
    # three groups a round, and still the initial model up once and one aggregate down a round
    assert moved == {"h2d_calls": 1, "h2d_models": 1, "d2h_calls": 3, "d2h_models": 3}
    assert yaml.safe_load((tmp_path / "capped" / "config.yaml").read_text())["runtime"]["group_max"] == 3
    with pytest.raises(ConfigError, match=r"runtime\.group_max.*runtime\.fast_path: true.*allowed here: auto"):
        tiny(runtime={"group_max": 3})


def test_a_run_with_results_on_the_device_resumes_as_uninterrupted(tmp_path):
    """Ctrl-C in round 2 of a fast-path HierFAVG run (results and edge sums on the device), resume: the same files,
    the resolved cap included."""
    import copy

    from tests.conftest import TINY
    from tests.driver.test_recovery import assert_resumes_as_uninterrupted

    raw = copy.deepcopy(TINY)
    raw.update(protocol={"name": "hierfavg", "kappa2": 2}, topology={"edge_servers": 2}, stop={"rounds": 4},
               runtime={"executor": "local", "fast_path": True, "checkpoint": {"every_cloud_aggregations": 1}})
    assert_resumes_as_uninterrupted(tmp_path, raw)


def test_edge_models_kept_on_an_accelerator_give_the_bits_of_edge_models_copied_back(tmp_path, monkeypatch):
    """HierFAVG on the fast path with the accelerator's code path (device ``cpu:0``: the vmap trainer, the torch
    sums, results and edge models as device tensors; CPU kernels, no pinned memory): keeping the edge models on the
    device gives the contract outputs of copying each back to the host, with 1 upload and 3 downloads instead of
    3 and 12 (2 edges, 2 edge rounds a cloud round, 3 cloud rounds)."""
    import torch

    import hierfl.learn.vmapped as vmapped
    from hierfl.runtime import server_roles
    from tests.golden import contract_outputs

    monkeypatch.setattr("hierfl.runtime.device_host.resolve_device", lambda d: "cpu:0")
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: "cpu:0")
    resolve = vmapped.resolve_device
    monkeypatch.setattr(vmapped, "resolve_device", lambda d: d if d == "cpu:0" else resolve(d))
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **kw: empty(*a, **kw))

    def scenario():
        return tiny(devices={"count": 8}, protocol={"name": "hierfavg", "kappa2": 2}, topology={"edge_servers": 2},
                    runtime={"fast_path": True})

    kept = _transfers(monkeypatch, scenario(), tmp_path / "kept")
    commit = server_roles.LeaderHost.commit
    monkeypatch.setattr(server_roles.LeaderHost, "commit",
                        lambda self, *a, resident=False, **kw: commit(self, *a, **kw))
    copied = _transfers(monkeypatch, scenario(), tmp_path / "copied")
    assert kept == {"h2d_calls": 1, "h2d_models": 1, "d2h_calls": 3, "d2h_models": 3}
    assert copied == {"h2d_calls": 3, "h2d_models": 3, "d2h_calls": 12, "d2h_models": 12}
    a, b = contract_outputs(tmp_path / "kept"), contract_outputs(tmp_path / "copied")
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
