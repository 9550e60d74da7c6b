"""The cloud role in the driver's process, behind the same calls as the cloud actor's handle.

Since the cloud aggregates with numpy only (the Ray executor evaluates on a host), a process of its
own cost a Ray run about 60-110 MB of memory (PSS: ``import ray`` and numpy, a Ray core worker,
its share of the object store) and about 1 CPU s, for work that takes the driver microseconds per
call (scale, goal (c), measured on W1a with ``analysis/bench/startup.py``). :class:`DriverCloud`
runs the very same role object (:class:`~hierfl.runtime.ray_actors.CloudActor`) in the driver,
so :class:`~hierfl.runtime.ray_executor.RayExecutor` keeps calling ``cloud.method.remote(...)``
and reading the returned handles with :func:`get` (``ray.get`` for a ref) whichever it is.

What a call does, and why it gives the actor's bits:

* It runs at once, in the order the calls are made (an actor runs one caller's calls in order too).
* Top-level ``ObjectRef`` arguments are resolved with one ``ray.get``, as Ray resolves them for an
  actor: numpy arrays come back as the same read-only views of the object store. Every other
  argument is deep-copied first, as Ray's serialization copies it for an actor. So the role never
  aliases the driver's objects (e.g. a checkpoint's roles state, restored twice after two losses).
* The result is a copy the role cannot change afterwards, exactly as with an actor's return value.
  A small array (a model vector, at most Ray's inline-argument size) or ``None`` (a fold-in) stays
  in the driver as a read-only :class:`InDriver` copy; anything else is ``ray.put`` into the object
  store and its reference returned. A ``ray.put`` costs about 1.7 CPU ms (the driver and the raylet:
  a shared-memory object created, sealed and pinned) and a host reading it back about 0.8 ms more,
  against microseconds for the copy; a gossip run makes thousands of such small averages. An
  :class:`InDriver` sent to an actor is pickled as its array (Ray sends so small an argument inside
  the call itself), so the actor receives the very numbers a reference would have given it;
  :func:`get` reads either kind in the driver.
* The arithmetic is the role's own numpy code, in a process with the same numpy; it is the code the
  local executor already runs in its driver, whose results are identical to the Ray executor's
  (the golden tests compare the two runs of every shipped scenario byte for byte). The Ray
  executor's cloud actor kept the same code.

What differs: a call waits for its inputs (e.g. a leader's commit) in the driver instead of in
the actor. An input lost with a dead host therefore raises at the call, inside the run loop, and
the run recovers as before; a role's own error is raised by the call itself rather than by the
``ray.get`` of its result. A Ray client (``ray://``) keeps the actor: there every input would
cross the network into the driver.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import ray

__all__ = ["DriverCloud", "InDriver", "get", "INLINE_BYTES"]

INLINE_BYTES = 100 * 1024
"""The largest array result kept in the driver (:class:`InDriver`): Ray's default limit for an argument sent
inside an actor call (``max_direct_call_object_size``); a bigger one would be put into the object store again on
every call that sends it, so it is put once instead."""


class InDriver:
    """A small result of the cloud role kept in the driver's memory (see the module docstring): a read-only copy.

    It stands where an ``ObjectRef`` of the result would: protocols pass it around as a model handle, the
    cloud role's calls resolve it, and an actor call that sends it sends its array (:meth:`__reduce_ex__`)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce_ex__(self, protocol: Any) -> Any:
        # pickled as the value itself: an actor (or a checkpoint) receives the array, never this wrapper
        if self.value is None:
            return (type(None), ())
        return self.value.__reduce_ex__(protocol)


def get(refs: Any) -> Any:
    """``ray.get`` that also reads :class:`InDriver` results (alone or in a list), without a round trip."""
    if isinstance(refs, InDriver):
        return refs.value
    if isinstance(refs, list):
        if not any(isinstance(r, InDriver) for r in refs):
            return ray.get(refs)
        real = [r for r in refs if not isinstance(r, InDriver)]
        values = iter(ray.get(real) if real else [])
        return [r.value if isinstance(r, InDriver) else next(values) for r in refs]
    return ray.get(refs)


def _hold(result: Any) -> Any:
    """The handle of a role's result: an :class:`InDriver` copy when small (or None), else an object-store ref."""
    if result is None:
        return InDriver(None)
    if type(result) is np.ndarray and result.dtype != object and result.nbytes <= INLINE_BYTES:
        held = np.array(result, copy=True)  # the role's later changes must not reach it (an actor returns a copy)
        held.setflags(write=False)  # as read-only as the store's view a ray.get gives
        return InDriver(held)
    return ray.put(result)


class _Method:
    """``handle.method`` of an actor handle: ``.remote(*args, **kwargs)`` and a no-op ``.options``."""

    def __init__(self, owner: DriverCloud, name: str) -> None:
        self._owner, self._name = owner, name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner.call(self._name, args, kwargs)

    def options(self, **_: Any) -> _Method:
        return self


class DriverCloud:
    """Stands in for a cloud actor's handle; ``role`` is the cloud role object, run in this process."""

    in_driver = True

    def __init__(self, role: Any) -> None:
        self.role = role

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_") or name == "role" or not callable(getattr(self.role, name, None)):
            raise AttributeError(name)
        return _Method(self, name)

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``role.name(*args, **kwargs)`` with Ray's argument semantics; returns a handle of the result (an
        :class:`InDriver` or a ref)."""
        is_ref = [isinstance(a, (ray.ObjectRef, InDriver)) for a in args]
        keys = [k for k, v in kwargs.items() if isinstance(v, (ray.ObjectRef, InDriver))]
        refs = [a for a, r in zip(args, is_ref) if r] + [kwargs[k] for k in keys]
        values = iter(get(refs) if refs else [])
        resolved = [next(values) if r else copy.deepcopy(a) for a, r in zip(args, is_ref)]
        kw = {k: copy.deepcopy(v) for k, v in kwargs.items() if k not in keys}
        kw.update({k: next(values) for k in keys})
        return _hold(getattr(self.role, name)(*resolved, **kw))
