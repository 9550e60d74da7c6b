"""A protocol is unit-tested against a small fake of the interface (ARCHITECTURE.md §4a): no driver, no executor.

The fake keeps a list of timers and transfers; the test delivers them by hand, in an order it
chooses, and checks what the protocol asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hierfl.kernel.engine import Event, Priority
from hierfl.core.rng import stream
from hierfl.core.work import TrainSpec
from hierfl.env import Job, Record
from hierfl.methods.fedavg.protocol import FedAvgConfig
from hierfl.protocols.base import DeviceMsg


class FakeTelemetry:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.records: list[Record] = []

    def count(self, name: str, by: float = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by

    def record(self, rec: Record) -> None:
        self.records.append(rec)

    def span(self, *a: Any, **k: Any) -> None: ...
    def instant(self, *a: Any, **k: Any) -> None: ...


@dataclass
class FakeWorld:
    samples: np.ndarray
    edge_of: np.ndarray = field(default_factory=lambda: np.full(4, -1))

    @property
    def num_devices(self) -> int:
        return len(self.samples)


class FakeCloud:
    """The cloud's aggregation point: a weighted average of numbers."""

    def __init__(self, env: FakeEnv) -> None:
        self.env = env

    def add(self, update: float, weight: float, control_coef: Any = None) -> None:
        self.env.cloud.append((update, weight))

    def commit(self, participants: list[int], base: Any = None, source: str = "device",
               pack_control: bool = False) -> float:
        env = self.env
        env.commits.append(participants)
        total = sum(w for _, w in env.cloud)
        model, env.cloud = sum(u * w for u, w in env.cloud) / total, []
        return model


class FakeEnv:
    """Just what FedAvg uses: a clock, transfers and jobs held for the test, and a cloud that averages numbers."""

    def __init__(self, samples: list[int], policy: Any) -> None:
        self.now, self.stopping, self.telemetry = 0.0, False, FakeTelemetry()
        self.world = FakeWorld(np.array(samples))
        self.spec, self.straggler, self.global_model = TrainSpec(epochs=1), policy, 0.0
        self.sent: list[tuple[Any, Any, str, Any]] = []
        self.cloud: list[tuple[float, float]] = []
        self.commits: list[list[int]] = []
        self.seq = 0

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        return stream(7, name, *ids)

    @property
    def live(self) -> FakeEnv:  # everyone is always online
        return self

    @property
    def controls(self) -> FakeEnv:  # no control variates
        return self

    def online_count(self) -> int:
        return self.world.num_devices

    def available(self, devices: Any = None) -> list[int]:
        return list(range(self.world.num_devices)) if devices is None else sorted(devices)

    def control(self) -> None:
        return None

    def coef(self, device: int) -> None:
        return None

    def send(self, src: Any, dst: Any, event: str, payload: Any, name: str, priority: int = 0, **kw: Any) -> int:
        self.sent.append((src, dst, event, payload))
        return len(self.sent)

    def start_job(self, device: int, model: Any, payload: Any, spec: Any = None, control: Any = None) -> tuple:
        self.seq += 1
        job = Job(device, 0, float(device + 1), None, 1.0, self.now)  # the "trained model" is device + 1
        return job, Event(self.now + 1.0, Priority.ARRIVAL, self.seq, "train_done", payload)

    def finish_training(self, job: Job) -> dict:
        return {}

    def tier(self, tier: str, entity: int = 0) -> FakeCloud:
        assert (tier, entity) == ("cloud", 0), "FedAvg aggregates at the cloud only"
        return FakeCloud(self)

    def set_global(self, handle: Any) -> None:
        self.global_model = handle


def _deliver(proto: Any, kind: str, payload: Any) -> None:
    proto.handle(Event(0.0, 0, 0, kind, payload))


def test_fedavg_round_against_a_fake_env():
    from hierfl.protocols.base import PROTOCOLS

    wait_all = type("WaitAll", (), {"name": "wait_all", "deadline_s": None, "partial_work": False,
                                    "select_count": staticmethod(lambda m: m),
                                    "needed": staticmethod(lambda sel, m: sel)})()
    env = FakeEnv([10, 30, 20, 40], wait_all)
    assert PROTOCOLS.get("fedavg") is FedAvgConfig
    proto = FedAvgConfig(fraction=0.5).create(env)
    proto.start()
    # m = max(ceil(0.5 * 4), 1) = 2 devices, drawn from stream ("fedavg.select", 0)
    chosen = sorted(int(i) for i in stream(7, "fedavg.select", 0).choice(4, size=2, replace=False))
    assert [dst for _, dst, kind, _ in env.sent] == [("device", d) for d in chosen]
    assert all(kind == "train_start" and isinstance(p, DeviceMsg) and p.round == 0 for *_, kind, p in
               [(s, d, k, p) for s, d, k, p in env.sent])
    downloads = list(env.sent)
    for _, _, _, payload in downloads:
        _deliver(proto, "train_start", payload)
        _deliver(proto, "train_done", payload)
    uploads = [s for s in env.sent[len(downloads):] if s[2] == "upload_done"]
    assert [src for src, *_ in uploads] == [("device", d) for d in chosen]
    for _, _, _, payload in uploads:
        _deliver(proto, "upload_done", payload)
    # the round closed once, with both devices, weighted by samples: Σ n_k (k+1) / Σ n_k
    assert env.commits[0] == chosen
    n = env.world.samples
    assert env.global_model == sum(n[d] * (d + 1) for d in chosen) / sum(n[d] for d in chosen)
    closes = [r for r in env.telemetry.records if r.EVENT == "round_close"]
    assert len(closes) == 1 and closes[0].arrived == 2 and closes[0].dropped == 0
    # round 1 began at once: two new downloads for round 1
    assert [p.round for *_, p in env.sent[len(downloads) + len(uploads):]] == [1, 1]
