"""The Ray executor's outbox: jobs and fold-ins buffered in the driver and sent in batches.

Coalescing. The driver runs ahead in virtual time and blocks only when an event needs a result
(a job's completion, an evaluation). Jobs submitted meanwhile are buffered and dispatched, at the
latest when the driver is about to block, as one task per host; fold-ins of arriving updates are
buffered likewise and sent as one call. Every job is still submitted before the event that
consumes it, and all jobs that overlap in virtual time run in parallel, but Ray's fixed cost per
task (several milliseconds with an 800 KB result on a small machine) is paid per batch, not per
job. A batch's results are the rows of one array; receivers take zero-copy row views, and its
stats list is fetched once, by the first ``wait`` on one of its jobs (:class:`BatchStats`), so
a job costs the driver no Ray call of its own.

Placement. A job's result does not depend on where it runs (it is a pure function of its start
model, the device's data and its seed), so jobs go to the host with the fewest outstanding jobs;
every host holds the shared, read-only training arrays from the object store. A trainer that keeps
per-device state in the host (a job method's ``keeps_device_state``) is the exception: each device then has
a fixed home host, ``device % workers``, and all its jobs run there in submission order (Ray runs
one caller's tasks on an actor in order), so its state evolves exactly as in the local executor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from hierfl.core.jobs import Term
from hierfl.core.work import TrainSpec
from hierfl.learn.batched import JobGroups
from hierfl.runtime.driver_cloud import InDriver

__all__ = ["Batches", "BatchStats", "Slot", "model_ref", "ref_row", "tags_kw", "term_positions",
           "unique_refs"]

_MAX_BUFFERED_JOBS_PER_HOST = 64


@dataclass(eq=False)
class Slot:
    """Handle of one job's result: row ``row`` of batch array ``ref`` (bound when dispatched)."""

    device: int
    seed: int
    spec: TrainSpec
    params: Any
    control: Any = None
    ref: Any = None
    row: int | None = None
    stats: Any = None
    host: int = -1
    group: int = -1  # fast path: the job's group (JobGroups), -1: none
    batch: BatchStats | None = None  # the stats of the batch it was dispatched in, fetched once


@dataclass(eq=False)
class BatchStats:
    """The stats list of one dispatched batch, shared by its slots: fetched by the first ``wait`` on
    one of them, so the other jobs of the batch cost the driver no Ray call at all."""

    ref: Any
    value: list[dict[str, float]] | None = None


def ref_row(handle: Any) -> tuple[Any, int | None]:
    """(object ref, row or None) behind a handle: a job's row of its batch array, or a whole vector."""
    if isinstance(handle, Slot):
        return handle.ref, handle.row
    return handle, None


def model_ref(handle: Any) -> Any:
    """The ref of a model handle (a whole vector, not a job's row)."""
    ref, row = ref_row(handle)
    if row is not None:
        raise ValueError("a server optimizer's base must be a model handle, not a job result")
    return ref


def unique_refs(handles: list[Any]) -> tuple[list[int], list[int | None], list[Any]]:
    """(index into unique refs, row, unique refs): a batch array is sent once per call."""
    refs: list[Any] = []
    index, rows = [], []
    for h in handles:
        ref, row = ref_row(h)
        if ref is None:
            raise RuntimeError("an update was aggregated before its training job was dispatched")
        pos = next((i for i, r in enumerate(refs) if r is ref), None)
        if pos is None:
            refs.append(ref)
            pos = len(refs) - 1
        index.append(pos)
        rows.append(row)
    return index, rows, refs


def term_positions(terms: list[Term], index: list[int], rows: list[int | None]
                   ) -> tuple[list[int], list[int], list[int | None], list[int | None]]:
    """(positions of the ``a``, of the ``b`` or -1, their rows) of ``Σ c·(a − b)`` among a call's refs."""
    plus: list[int] = []
    minus: list[int] = []
    plus_rows: list[int | None] = []
    minus_rows: list[int | None] = []
    k = 0
    for _, p, m in terms:
        plus.append(index[k])
        plus_rows.append(rows[k])
        k += 1
        if m is None:
            minus.append(-1)
            minus_rows.append(None)
        else:
            minus.append(index[k])
            minus_rows.append(rows[k])
            k += 1
    return plus, minus, plus_rows, minus_rows


def tags_kw(tags: list[Any]) -> dict[str, Any]:
    """``tags=…`` for an add call when one of the updates is Byzantine (else nothing: today's call)."""
    return {"tags": tags} if any(t is not None for t in tags) else {}


class Batches:
    """What the driver has buffered for the actors, sent in batches (see the module docstring).

    ``hosts``, ``leaders`` (None: no edge servers) and ``cloud`` are the actors' handles;
    ``groups`` the opt-in fast path's groups (None: off).
    """

    def __init__(self, hosts: list[Any], leaders: Any, cloud: Any, groups: JobGroups | None) -> None:
        self.hosts, self.leaders, self.cloud, self.groups = hosts, leaders, cloud, groups
        self.workers = len(hosts)
        self.outstanding = [0] * self.workers
        self.jobs: list[Slot] = []
        self._cloud_adds: list[tuple[float, Any, float | None]] = []
        self._edge_adds: list[tuple[int, float, Any, float | None]] = []
        # Byzantine tags of the buffered adds, parallel to the lists above (robust aggregation only)
        self._cloud_tags: list[Any] = []
        self._edge_tags: list[Any] = []
        # fold-ins return nothing and nobody waits on them; a lost input (a dead host's result)
        # would make one fail unseen, so their refs are checked at every checkpoint and at the end
        self._unchecked: list[Any] = []

    # -- jobs -----------------------------------------------------------------------------------
    def need(self, *handles: Any) -> None:
        """Fast path: close the open group if one of ``handles`` is one of its jobs (rule: JobGroups)."""
        if self.groups is not None and self.groups.open and any(
                isinstance(h, Slot) and h.group == self.groups.open_id for h in handles):
            self.groups.seal()

    def submit(self, slot: Slot) -> None:
        """Buffer a job; the buffer is sent once it holds enough jobs for every host."""
        self.jobs.append(slot)
        if len(self.jobs) >= _MAX_BUFFERED_JOBS_PER_HOST * self.workers:
            self.flush_jobs()

    def reopen(self, slots: list[Slot], next_id: int) -> None:
        """Re-form the open fast-path group from restored (undispatched) job slots, in their order."""
        assert self.groups is not None
        self.groups.next_id = next_id
        for slot in slots:
            slot.group, closed = self.groups.add(slot, slot.spec, slot.params)
            assert not closed, "a restored open group closed while being re-formed"
            self.jobs.append(slot)

    def least_busy(self) -> int:
        """The host with the fewest outstanding jobs (the first of them)."""
        return min(range(self.workers), key=lambda h: (self.outstanding[h], h))

    def flush_jobs(self) -> None:
        """Dispatch the buffered jobs, one call per host and spec (an open fast-path group waits)."""
        if not self.jobs:
            return
        jobs, self.jobs = self.jobs, []
        if self.groups is not None and self.groups.open:  # an open group is dispatched whole, once closed
            self.jobs = [s for s in jobs if s.group == self.groups.open_id]
            jobs = [s for s in jobs if s.group != self.groups.open_id]
        for (host, spec), batch in self._place(jobs).items():
            self._dispatch(host, spec, batch)

    def flush_jobs_for(self, role: Any, handles: list[Any]) -> None:
        """Dispatch the buffered jobs before ``role`` computes from ``handles``, unless it is the cloud role in the
        driver (:class:`~hierfl.runtime.driver_cloud.DriverCloud`) and every input is dispatched and finished.

        That role reads its inputs at once: it would block on an unfinished one (the hosts must work meanwhile, so
        everything is sent), but a finished one needs nothing sent. The buffered jobs then keep gathering into
        batches until the driver next blocks, as in the executor's ``wait``: a serverless run averages after nearly
        every job, and sending at each average made batches of one job (a Ray call of about 2.5 CPU ms each).
        An actor role resolves its inputs itself (the driver never blocks on it): everything is sent, as before."""
        if not getattr(role, "in_driver", False):
            self.flush_jobs()
            return
        refs: list[Any] = []
        for handle in handles:
            if isinstance(handle, Slot):
                if handle.ref is None:  # not dispatched yet
                    self.flush_jobs()
                    return
                refs.append(handle.ref)
            elif isinstance(handle, ray.ObjectRef):
                refs.append(handle)
        if refs:
            unique = list(dict.fromkeys(refs))
            ready, _ = ray.wait(unique, num_returns=len(unique), timeout=0)
            if len(ready) < len(unique):
                self.flush_jobs()

    def _place(self, jobs: list[Slot]) -> dict[tuple[int, TrainSpec], list[Slot]]:
        """The jobs by host and spec: a job that keeps device state at its device's home, a fast-path group on one host,
        any other on the least busy host."""
        groups: dict[tuple[int, TrainSpec], list[Slot]] = {}
        group_host: dict[int, int] = {}
        for slot in jobs:
            if slot.spec.keeps_device_state:  # per-device state lives in its host: a fixed home
                host = slot.device % self.workers
            elif slot.group in group_host:  # a fast-path group is trained whole by one host
                host = group_host[slot.group]
            else:
                host = self.least_busy()
                if slot.group >= 0:
                    group_host[slot.group] = host
            self.outstanding[host] += 1
            slot.host = host
            groups.setdefault((host, slot.spec), []).append(slot)
        return groups

    def _dispatch(self, host: int, spec: TrainSpec, batch: list[Slot]) -> None:
        """One call for a host's jobs of one spec: start models (and server controls) in, two arrays out."""
        controls = [slot.control for slot in batch if slot.control is not None]
        index, rows, arrays = unique_refs([slot.params for slot in batch] + controls)
        control_index: list[int] | None = None
        if controls:
            it = iter(index[len(batch):])
            control_index = [next(it) if slot.control is not None else -1 for slot in batch]
            index, rows = index[:len(batch)], rows[:len(batch)]
        out_ref, stats_ref = self.hosts[host].train_many.options(num_returns=2).remote(
            [s.device for s in batch], [s.seed for s in batch], spec, index, rows, control_index, *arrays,
            groups=[s.group for s in batch] if self.groups is not None and not spec.keeps_device_state else None)
        box = BatchStats(stats_ref)
        for k, slot in enumerate(batch):
            slot.ref, slot.row, slot.stats, slot.batch = out_ref, k, stats_ref, box

    # -- fold-ins -------------------------------------------------------------------------------
    def fold_edge(self, edge: int, weight: float, update: Any, control_coef: float | None, tag: Any) -> None:
        """Buffer a fold-in at the leader actor (sent in order with the others)."""
        self.need(update)
        self._edge_adds.append((edge, weight, update, control_coef))
        self._edge_tags.append(tag)

    def fold_cloud(self, weight: float, update: Any, control_coef: float | None, tag: Any) -> None:
        """Buffer a fold-in at the cloud actor (sent in order with the others)."""
        self.need(update)
        self._cloud_adds.append((weight, update, control_coef))
        self._cloud_tags.append(tag)

    def take_cloud_adds(self) -> tuple[list[tuple[float, Any, float | None]], list[Any]]:
        """The cloud's buffered fold-ins and their tags, taken out of the buffer (a commit sends them)."""
        adds, self._cloud_adds = self._cloud_adds, []
        tags, self._cloud_tags = self._cloud_tags, []
        return adds, tags

    def flush(self, jobs: bool = True) -> None:
        """Dispatch everything buffered, jobs first (called before the driver blocks); ``jobs`` False: the
        fold-ins only (the caller has sent the jobs it needs: :meth:`flush_jobs_for`)."""
        if jobs:
            self.flush_jobs()
        if self._cloud_adds:
            adds, tags = self.take_cloud_adds()
            index, rows, refs = unique_refs([h for _, h, _ in adds])
            self._watch(
                self.cloud.add_many.remote([w for w, _, _ in adds], index, rows, [c for _, _, c in adds], *refs,
                                           **tags_kw(tags)))
        if self._edge_adds and self.leaders is not None:
            eadds, self._edge_adds = self._edge_adds, []
            etags, self._edge_tags = self._edge_tags, []
            index, rows, refs = unique_refs([h for _, _, h, _ in eadds])
            self._watch(
                self.leaders.add_many.remote([e for e, _, _, _ in eadds], [w for _, w, _, _ in eadds], index, rows,
                                             [c for *_, c in eadds], *refs, **tags_kw(etags)))
            self._prune()

    def _watch(self, call: Any) -> None:
        """Keep a fold-in's ref to check; the cloud role in the driver raised at the call already (its
        result is an :class:`~hierfl.runtime.driver_cloud.InDriver`, nothing to wait for)."""
        if not isinstance(call, InDriver):
            self._unchecked.append(call)

    def _prune(self) -> None:
        """Check the fold-ins that have finished (keeps the list short on long runs)."""
        if len(self._unchecked) < 256:
            return
        done, self._unchecked = ray.wait(self._unchecked, num_returns=len(self._unchecked), timeout=0)
        ray.get(done)

    def check(self) -> None:
        """Raise if a fold-in failed (e.g. its update came from a host that died)."""
        calls, self._unchecked = self._unchecked, []
        ray.get(calls)
