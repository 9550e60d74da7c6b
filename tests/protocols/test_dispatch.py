"""A protocol's handler for each event kind is looked up once per protocol object, so a class
patched between runs is seen by the next run's protocol."""

from __future__ import annotations

from hierfl.scenario.loader import load_scenario
from tests.golden import ROOT


def test_a_handler_is_looked_up_per_protocol_object(tmp_path, monkeypatch):
    from hierfl.driver import run_scenario
    from hierfl.methods.fedavg import protocol as fedavg

    sc = load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["stop.virtual_time_s=20", "training.trainer=none", "runtime.executor=local",
                                                                "evaluation.target_accuracy=null"])
    seen: list[int] = []
    original = fedavg.FedAvg.on_upload_done
    run_scenario(sc, tmp_path / "a")
    with monkeypatch.context() as m:
        def counting(self, event):  # type: ignore[no-untyped-def]
            seen.append(event.payload.device)
            original(self, event)

        m.setattr(fedavg.FedAvg, "on_upload_done", counting)
        run_scenario(sc, tmp_path / "b")  # a new protocol object sees the patched class
    assert seen
    n = len(seen)
    run_scenario(sc, tmp_path / "c")  # and the next one the class as it is again
    assert len(seen) == n
