"""The cloud role in the driver's process, behind the same calls as the cloud actor's handle.

Since the cloud aggregates with numpy only (the Ray executor evaluates on a host), a process of its
own cost a Ray run about 60-110 MB of memory (PSS: ``import ray`` and numpy, a Ray core worker,
its share of the object store) and about 1 CPU s, for work that takes the driver microseconds per
call (scale, goal (c), measured on W1a with ``analysis/bench/startup.py``). :class:`DriverCloud`
runs the very same role object (:class:`~hierfl.runtime.ray_actors.CloudActor`) in the driver,
so :class:`~hierfl.runtime.ray_executor.RayExecutor` keeps calling ``cloud.method.remote(...)``
and ``ray.get``-ing the returned references whichever it is.

What a call does, and why it gives the actor's bits:

* It runs at once, in the order the calls are made (an actor runs one caller's calls in order too).
* Top-level ``ObjectRef`` arguments are resolved with one ``ray.get``, as Ray resolves them for an
  actor: numpy arrays come back as the same read-only views of the object store. Every other
  argument is deep-copied first, as Ray's serialization copies it for an actor. So the role never
  aliases the driver's objects (e.g. a checkpoint's roles state, restored twice after two losses).
* The result is ``ray.put`` into the object store and its reference returned, so that the driver
  and the hosts see a copy the role cannot change afterwards, exactly as with an actor's return
  value; ``None`` results (fold-ins) are put too, so they can be waited on like the actor's.
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

import ray

__all__ = ["DriverCloud"]


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
        """``role.name(*args, **kwargs)`` with Ray's argument semantics; returns a ref of the result."""
        is_ref = [isinstance(a, ray.ObjectRef) for a in args]
        keys = [k for k, v in kwargs.items() if isinstance(v, ray.ObjectRef)]
        refs = [a for a, r in zip(args, is_ref) if r] + [kwargs[k] for k in keys]
        values = iter(ray.get(refs) if refs else [])
        resolved = [next(values) if r else copy.deepcopy(a) for a, r in zip(args, is_ref)]
        kw = {k: copy.deepcopy(v) for k, v in kwargs.items() if k not in keys}
        kw.update({k: next(values) for k in keys})
        return ray.put(getattr(self.role, name)(*resolved, **kw))
