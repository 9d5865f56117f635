"""Python object state as effects: the object heap a traced program reads and writes, named by identity.

Tensor effects name storage; this module names the other state a traced program touches — attributes of objects,
items of dicts, the contents of lists — as **slots**: ``(object identity, kind, key)``. The identity, not the access
path, names the object, so two paths to one object (tied weights, ``opt.param_groups[0]["params"][0] is model.w``, a
scheduler's reference to its optimizer) are one object, as two views of one storage are one alias class. A slot is
a :class:`~effects.model.Resource` (``obj[0x7f…:attr:lr]``), so an instruction that reads or writes it is ordered by
the dependency graph with every other effect, exactly like ``rng`` or ``comm[group]``.

:class:`Heap` is the record one trace keeps (the tracer calls :meth:`Heap.track`, :meth:`Heap.read`,
:meth:`Heap.write`); :meth:`Heap.plan` turns it into the **write-back**: what an epilogue must do, after the
computation, so that the caller's objects end as eager Python would leave them. The plan follows the rules dynamo
learned (``torch/_dynamo/side_effects.py``), stated here once for every integration:

* **final state, not history** — one write per slot, its last value; a slot written back to the value it held
  when the call started (a flag set and restored) costs nothing;
* **program order** — writes replay in the order of their last assignment, after every value they store exists;
* **objects made in the call** come first (:class:`Materialize`), and only those that escape — stored into an
  object the caller holds, or returned (:meth:`Heap.escape`); a temporary built and dropped inside the call costs
  nothing;
* **interpreter-owned objects are not state**: context-manager instances (``no_grad``, ``enable_grad``,
  ``inference_mode``, ``set_grad_enabled``, ``autocast``) record the mode they replaced in their own attributes; the
  trace carries the *mode* (a resource, like grad mode in Thunder's compile data), the instance is never guarded
  nor written back (:data:`INTERPRETER_OWNED`).

The heap is framework-neutral: values are whatever the integration stores (proxies, constants); which of them an
epilogue can carry is the integration's question, answered with :class:`~effects.errors.ObjectStateError` naming
the object's path and the slot when it cannot.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import ObjectStateError
from .model import Resource

__all__ = ["SlotKind", "Slot", "Write", "Materialize", "WriteBack", "Heap", "INTERPRETER_OWNED",
           "interpreter_owned", "DELETED"]


class SlotKind(enum.Enum):
    """What part of an object a slot is."""

    ATTR = "attr"
    """An attribute (``obj.key``)."""
    ITEM = "item"
    """A mapping's item (``obj[key]``)."""
    CONTENTS = "contents"
    """A sequence's whole contents (a list after ``append``/``pop``/``obj[i] = v``: replayed as one assignment)."""


@dataclass(frozen=True, slots=True)
class Slot:
    """A place in the object heap: the object's identity (``id``), the kind of place and its key."""

    obj: int
    kind: SlotKind
    key: Hashable = None

    @property
    def resource(self) -> Resource:
        """The slot as an effect resource: instructions that touch it are ordered with every other effect."""
        where = "" if self.kind is SlotKind.CONTENTS else f":{self.key!r}"
        return Resource("obj", f"{self.obj:#x}:{self.kind.value}{where}")


class _Deleted:
    def __repr__(self) -> str:
        return "DELETED"


DELETED: Any = _Deleted()
"""The value of a slot the program deleted (``del obj.attr``, ``del d[key]``)."""


@dataclass(frozen=True, slots=True)
class Write:
    """One step of a write-back: store ``value`` into ``slot`` of ``target`` (:data:`DELETED`: delete it)."""

    slot: Slot
    target: Any
    value: Any
    route: str
    """How the program reached the object (for messages), e.g. ``"opt.state[p]"``."""


@dataclass(frozen=True, slots=True)
class Materialize:
    """One step of a write-back: an object the call created and the caller keeps, to exist before any write
    stores it (its own slots follow as :class:`Write` steps)."""

    target: Any
    route: str


WriteBack = tuple[Materialize | Write, ...]
"""A write-back plan: every :class:`Materialize` first, then the writes in program order."""


INTERPRETER_OWNED: tuple[type, ...] = (
    torch.utils._contextlib._DecoratorContextManager,  # no_grad, enable_grad, set_grad_enabled, inference_mode
    torch.autocast,
)
"""Types whose instances (subclasses' too) belong to the interpreter, not to the program: every decorator context
manager of ``torch.utils._contextlib`` (``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``, and any
a library derives from them) and ``torch.autocast``. Their attributes hold the tracer's own bookkeeping
(``no_grad.__enter__`` stores the previous mode in ``self.prev``, ``inference_mode`` its C guard): what they change
is a global mode the trace carries; a tracer sets their attributes natively and never guards nor writes them back."""


def interpreter_owned(obj: object) -> bool:
    """Whether ``obj``'s state belongs to the interpreter: an instance of :data:`INTERPRETER_OWNED`, or of a class
    that declares ``__interpreter_owned__ = True`` (a tracer's own objects handed to the program, such as the handle
    a traced ``register_hook`` returns: the program may keep them, an epilogue hands them back as they are)."""
    return isinstance(obj, INTERPRETER_OWNED) or getattr(type(obj), "__interpreter_owned__", False) is True


@dataclass(slots=True)
class _Entry:
    obj: Any  # a strong reference: the id stays unique while the heap lives (dynamo's keepalive)
    routes: list[str]
    created: bool


@dataclass(slots=True)
class _Assignment:
    target: Any
    value: Any
    before: Any  # the slot's value when the call started (DELETED: it had none)


@dataclass
class Heap:
    """The Python object state one trace touches, keyed by identity (see the module docstring).

    ``owned`` decides which objects are interpreter-owned (default :func:`interpreter_owned`): writes to them are
    not recorded at all."""

    owned: Callable[[object], bool] = interpreter_owned
    _objects: dict[int, _Entry] = field(default_factory=dict)
    _writes: dict[Slot, _Assignment] = field(default_factory=dict)
    _reads: dict[Slot, Any] = field(default_factory=dict)
    _escaping: set[int] = field(default_factory=set)

    # --- recording ----------------------------------------------------------------------------------------------
    def track(self, obj: object, route: str | None = None, *, created: bool = False) -> int:
        """Register ``obj`` (reached by ``route``; ``created``: made by the call) and return its identity. A second
        route to the same object is remembered beside the first: it is the same object, not a second one."""
        entry = self._objects.get(id(obj))
        if entry is None:
            entry = self._objects[id(obj)] = _Entry(obj, [], created)
        if route is not None and route not in entry.routes:
            entry.routes.append(route)
        return id(obj)

    def read(self, obj: object, kind: SlotKind, key: Hashable, value: Any) -> None:
        """The program read ``value`` from a slot of ``obj`` (before any write to it: what the trace assumed)."""
        slot = Slot(self.track(obj), kind, key)
        if slot not in self._writes:
            self._reads.setdefault(slot, value)

    def write(self, obj: object, kind: SlotKind, key: Hashable, value: Any, before: Any = DELETED) -> bool:
        """The program stored ``value`` (:data:`DELETED`: deleted the slot) into a slot of ``obj``, which held
        ``before`` when the call started (only the first write's ``before`` counts). Returns whether the write is
        state (False for interpreter-owned objects, whose writes are not recorded)."""
        if self.owned(obj):
            return False
        slot = Slot(self.track(obj), kind, key)
        first = self._writes.pop(slot, None)
        self._writes[slot] = _Assignment(obj, value, before if first is None else first.before)  # now last
        return True

    def escape(self, value: object) -> None:
        """``value`` leaves the call (returned): if the call made it, it must exist afterwards."""
        self._escaping.add(id(value))

    # --- queries ------------------------------------------------------------------------------------------------
    def routes(self, obj: object) -> tuple[str, ...]:
        """Every route by which the program reached ``obj``."""
        entry = self._objects.get(id(obj))
        return tuple(entry.routes) if entry is not None else ()

    def shared(self) -> Iterator[tuple[str, ...]]:
        """The route groups that reach one object by several paths (what a prologue guards as identical)."""
        return (tuple(e.routes) for e in self._objects.values() if len(e.routes) > 1)

    def reads(self) -> dict[Slot, Any]:
        """Every slot read before the program wrote it, with the value read (what a prologue guards)."""
        return dict(self._reads)

    def written(self) -> frozenset[Slot]:
        """Every slot the program wrote."""
        return frozenset(self._writes)

    # --- the write-back -----------------------------------------------------------------------------------------
    def plan(self) -> WriteBack:
        """The write-back (module docstring): objects the call made that escape, then the final value of every
        written slot of an object that exists afterwards, in the order of the last assignments; slots left as they
        were skipped."""
        live = self._live_created()
        steps: list[Materialize | Write] = [Materialize(self._objects[i].obj, self._route(i)) for i in live]
        for slot, assignment in self._writes.items():
            entry = self._objects[slot.obj]
            if entry.created and slot.obj not in live:
                continue  # a temporary of the call
            if not entry.created and assignment.value is assignment.before:
                continue  # restored: the caller sees no change
            steps.append(Write(slot, assignment.target, assignment.value, self._route(slot.obj)))
        return tuple(steps)

    def _live_created(self) -> list[int]:
        """The created objects reachable from an escaping value or from a value stored into an object the caller
        holds, transitively through created objects' own slots — in the order they were first tracked."""
        stores: dict[int, list[Any]] = {}
        for slot, assignment in self._writes.items():
            stores.setdefault(slot.obj, []).append(assignment.value)
        pending = list(self._escaping)
        pending += [id(v) for o, values in stores.items() if not self._objects[o].created for v in _members(values)]
        live: set[int] = set()
        while pending:
            i = pending.pop()
            entry = self._objects.get(i)
            if entry is None or not entry.created or i in live:
                continue
            live.add(i)
            pending += [id(v) for v in _members(stores.get(i, ()))]
        return [i for i in self._objects if i in live]

    def _route(self, obj: int) -> str:
        entry = self._objects[obj]
        return entry.routes[0] if entry.routes else f"<{type(entry.obj).__name__} made in the call>"

    def refuse(self, write: Write, why: str, fix: str) -> ObjectStateError:
        """The typed error for a write the integration cannot replay: names the object's routes and the slot."""
        routes = " = ".join(self.routes(write.target)) or write.route
        where = {SlotKind.ATTR: f".{write.slot.key}", SlotKind.ITEM: f"[{write.slot.key!r}]",
                 SlotKind.CONTENTS: "[:]"}[write.slot.kind]
        return ObjectStateError(f"cannot write back {routes}{where}: {why}. {fix}")


def _members(values: Iterable[Any]) -> Iterator[Any]:
    """The values and, for lists, tuples and dicts among them, their members (one level: a created container's
    own members are its slots)."""
    for value in values:
        yield value
        if isinstance(value, (list, tuple)):
            yield from value
        elif isinstance(value, dict):
            yield from value.values()
