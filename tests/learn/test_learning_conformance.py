"""Conformance: every registered trainer and server optimizer runs in a tiny scenario under the local executor
and Ray (1 and 2 hosts for the stateful SCAFFOLD) with identical metrics and final model."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.driver import run_scenario
from hierfl.learn.serveropt import SERVER_OPTIMIZERS
from hierfl.learn.trainers import TRAINERS
from tests.conftest import tiny
from tests.determinism.test_determinism import metrics_without_wall

HIER = {"protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 2, "fraction": 0.7},
        "topology": {"edge_servers": 2, "grouping": "random"}, "devices": {"count": 6},
        "data": {"dataset": {"num_samples": 360}}}

DUAL = {"name": "dual_input", "features": 4, "backbone": {"name": "mlp", "hidden": [6]}}

# (id, scenario overrides, Ray worker counts); together they cover every trainer and optimizer
CASES = [
    ("sgd+fedyogi", {"server_optimizer": "fedyogi", "protocol": {"fraction": 0.5}}, (2,)),
    ("fedprox+fedadam", {"training": {"trainer": {"name": "fedprox", "mu": 0.1}},
                         "server_optimizer": {"name": "fedadam", "lr": 0.05}, "protocol": {"fraction": 0.5}}, (2,)),
    ("scaffold+fedavgm", {"training": {"trainer": "scaffold", "momentum": 0.5}, "protocol": {"fraction": 0.75},
                          "server_optimizer": {"name": "fedavgm", "beta": 0.5}}, (1, 2)),
    ("hierfavg-scaffold+edge-fedadagrad", {**HIER, "training": {"trainer": "scaffold", "epochs": None},
                                           "server_optimizer": {"edge": {"name": "fedadagrad", "lr": 0.1},
                                                                "cloud": {"name": "fedavg", "lr": 0.8}}}, (2,)),
    ("fedbuff-fedprox+fedadam", {"protocol": {"name": "fedbuff", "K": 2, "concurrency": 3},
                                 "training": {"trainer": "fedprox", "epochs": 1},
                                 "server_optimizer": "fedadam", "stop": {"rounds": 5}}, (2,)),
    ("ahfl+edge-fedavgm+cloud-fedyogi", {**HIER, "protocol": {"name": "ahfl", "leader_period": 0.4,
                                                              "cloud_period": 1.1},
                                         "training": {"epochs": 1},
                                         "server_optimizer": {"edge": "fedavgm", "cloud": "fedyogi"}}, (2,)),
    # FedDC: h_i and c_i in each device's home host, under FedAvg (cloud rule) and HierFAVG (edge rule)
    ("feddc", {"training": {"trainer": {"name": "feddc", "alpha": 0.1}}, "protocol": {"fraction": 0.75,
                                                                                     "weighting": "uniform"}},
     (1, 2)),
    ("hierfavg-feddc-paper", {**HIER, "training": {"trainer": {"name": "feddc", "server_rule": "paper"},
                                                   "epochs": None}}, (2,)),
    ("hierfavg-feddc", {**HIER, "protocol": {**HIER["protocol"], "weighting": "uniform"},
                        "training": {"trainer": "feddc", "epochs": None}}, (2,)),
    # personalised trainers (personalisation): device state travels with the jobs, pooled over 1 or 2 hosts;
    # per-device evaluation on held-out rows and held-out devices is in every eval line
    ("fedper+device-eval", {"training": {"trainer": "fedper"}, "model": {"name": "mlp", "hidden": [6]},
                            "data": {"local_test_fraction": 0.25, "test_devices": 2}, "protocol": {"fraction": 0.5}},
     (1, 2)),
    ("hierfavg-lg_fedavg", {**HIER, "training": {"trainer": {"name": "lg_fedavg", "global_layers": 1}, "epochs": None},
                            "model": {"name": "mlp", "hidden": [6]}, "data": {"dataset": {"num_samples": 360},
                                                                               "local_test_fraction": 0.2}}, (2,)),
    ("fedasync-fedmeta-meta_sgd+fedper", {"protocol": {"name": "fedasync", "concurrency": 3},
                                          "training": {"trainer": {"name": "fedmeta", "learner": "meta_sgd",
                                                                   "head_layers": 1}, "epochs": 1},
                                          "model": {"name": "mlp", "hidden": [6]}, "stop": {"rounds": 5},
                                          "data": {"local_test_fraction": 0.25}}, (2,)),
    ("fedavgmeta", {"training": {"trainer": {"name": "fedavgmeta", "inner_steps": 2}},
                    "data": {"test_devices": 2}}, (2,)),
    # FedAlign: a local-loss change under an asynchronous protocol
    ("fedasync-fedalign", {"protocol": {"name": "fedasync", "concurrency": 3},
                           "training": {"trainer": {"name": "fedalign", "width": 0.5}, "epochs": 1},
                           "model": {"name": "mlp", "hidden": [6, 4]}, "stop": {"rounds": 5}}, (2,)),
    # DisTrans: offsets in each device's home host; each device evaluated through its own offset
    ("distrans+device-eval", {"training": {"trainer": "distrans"}, "model": DUAL,
                              "protocol": {"fraction": 0.75, "weighting": "uniform"},
                              "data": {"local_test_fraction": 0.25, "test_devices": 2}}, (1, 2)),
    ("fedasync-distrans-mean", {"protocol": {"name": "fedasync", "concurrency": 3}, "model": DUAL,
                                "training": {"trainer": {"name": "distrans", "offset_mode": "mean"}, "epochs": 1},
                                "stop": {"rounds": 5}, "data": {"local_test_fraction": 0.25}}, (2,)),
    ("hierfavg-distrans", {**HIER, "protocol": {**HIER["protocol"], "weighting": "uniform"}, "model": DUAL,
                           "training": {"trainer": {"name": "distrans", "offset_update": "alternating"},
                                        "epochs": None},
                           "data": {"dataset": {"num_samples": 360}, "local_test_fraction": 0.2}}, (2,)),
    # timing only: no job is submitted (its update is the start model) on either executor
    ("fedasync-none+fedavgm", {"protocol": {"name": "fedasync", "concurrency": 3},
                               "training": {"trainer": "none"}, "server_optimizer": "fedavgm",
                               "stop": {"rounds": 5}}, (1, 2)),
]


def _names(kind: str) -> set[str]:
    out = set()
    for _, over, _ in CASES:
        if kind == "trainer":
            t = over.get("training", {}).get("trainer", "sgd")
            out.add(t if isinstance(t, str) else t["name"])
        else:
            sec = over.get("server_optimizer", {})
            sec = {"cloud": sec} if isinstance(sec, str) or "name" in sec else sec
            out |= {v if isinstance(v, str) else v["name"] for v in sec.values()}
    return out


def test_cases_cover_every_registered_plugin():
    assert _names("trainer") == set(TRAINERS.names())
    assert _names("optimizer") == set(SERVER_OPTIMIZERS.names())


@pytest.mark.ray
@pytest.mark.parametrize(("over", "workers"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_local_and_ray_identical(tmp_path, ray_session, over, workers):
    local = run_scenario(tiny(**over), tmp_path / "local")
    assert local.summary["status"] == "completed" and local.summary["rounds"] >= 1
    ref = metrics_without_wall(tmp_path / "local")
    for w in workers:
        res = run_scenario(tiny(**over, runtime={"executor": "ray", "workers": w}), tmp_path / f"ray{w}")
        assert res.summary["workers"] == w
        assert metrics_without_wall(tmp_path / f"ray{w}") == ref
        assert np.array_equal(res.final_params, local.final_params)
