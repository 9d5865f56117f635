"""The one epilogue for Python object state: every write the traced call made to an object the caller holds —
attributes, dict items, list contents — recorded in one :class:`effects.Heap` by object identity, and replayed from
its plan.

Thunder's interpreter records assignments per *kind of container* (``process_recorded_modifications`` handles
module member dicts and nothing else); this project records the other kinds where the interpreter meets them:
attributes rebound on any reachable object (:mod:`thunder_ext.python_state.module_state`), items written into reachable
dicts
(:mod:`thunder_ext.python_state.dict_state`), lists grown or rewritten (:mod:`thunder_ext.python_state.object_state`).
Those modules are the
*recorders*; what they record is one model, the framework-neutral object heap of :mod:`effects.objects`, and this
module is its Thunder epilogue (the ``process_recorded_modifications`` stand-in, installed by
:mod:`thunder_ext.host.patches`):

1. Thunder's records of objects the call *created* are dropped (:func:`module_state.drop_created`): such an object
   has nothing to write back; if it outlives the call, the epilogue rebuilds it whole (``object_state``).
2. Every recorded write goes into a :class:`effects.Heap`, keyed by the object written — the real object, so two
   paths to one object (a scheduler's ``optimizer`` and the optimizer passed in; ``a.cfg is b.cfg``) are one object
   and one write per slot, its last value — with the first route's interpreter record kept as the way back to the
   run's object (:func:`_record`). An object's ``__dict__`` is written two ways, as Thunder records it: attributes
   with their final values (through the object), then, in program order, the items other code wrote into the dict
   itself (through the dict).
3. Thunder's own pass runs on what is left (buffers of modules: ``pack_buffer``, renamed by
   :func:`module_state.named_buffer_write`).
4. The heap's plan (:meth:`effects.Heap.plan`: final values in the order of their last assignment,
   interpreter-owned objects never recorded) becomes the epilogue's operators, one per slot kind
   (:class:`_Emitter`): :data:`module_state.SET_ATTRIBUTE`, :data:`dict_state.SET_ITEM`,
   :data:`object_state.SET_CONTENTS`, with every value as the epilogue must hand it to the caller
   (:func:`object_state.epilogue_value`: a tensor's proxy, without autograd history where eager's has none; an
   object the call made, rebuilt).

Cost: one pass over the interpreter's records at trace time; nothing on a cache hit but the operators themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from effects import Heap, Slot, SlotKind, Write

from thunder.core.proxies import Proxy
from thunder.core.trace import TraceCtx, tracectx

from . import dict_state, list_state, module_state, object_state

__all__ = ["write_back"]

Routes = dict[tuple[int, SlotKind], Any]
"""(object id, slot kind) -> the interpreter record of the first route that wrote such a slot of the object."""


def _real(wrapped: Any) -> Any:
    """The object an interpreter record stands for: the caller's, not the interpreter's copy of it (an attribute
    write's record is the object's ``__dict__``: one per object, so it identifies the object too)."""
    return wrapped.value if wrapped.original_value is wrapped.nothing else wrapped.original_value


def _record(heap: Heap, routes: Routes, wrapped: Any, kind: SlotKind, key: Any, value: Any) -> None:
    """One write into ``heap``, keyed by the real object of the interpreter record ``wrapped`` (its first route's
    record kept in ``routes`` to reach the run's object)."""
    obj = _real(wrapped)
    owner = wrapped.provenance.inputs[0] if kind is SlotKind.ATTR else wrapped.provenance  # obj.__dict__: obj
    heap.track(obj, object_state.describe(owner))
    routes.setdefault((id(obj), kind), wrapped)
    heap.write(obj, kind, key, value)


def write_back(original: Callable[..., Any], ctx: Any, epilogue_trace: TraceCtx) -> None:
    """Stand-in for ``jit_ext.process_recorded_modifications`` (``original``): see the module docstring."""
    module_state.drop_created(ctx)
    attributes = module_state.attribute_writes(ctx)  # taken before Thunder's pass: it sees none of them
    original(ctx, epilogue_trace)
    without_grad = module_state.without_grad(ctx)
    epilogue_trace.bound_symbols = [module_state.named_buffer_write(bsym, without_grad)
                                    for bsym in epilogue_trace.bound_symbols]
    heap, routes = Heap(), Routes()
    for owner, name, value in attributes:
        _record(heap, routes, owner, SlotKind.ATTR, name, value)
    for d, key, value in dict_state.take_writes(ctx):  # in program order (an object's __dict__ too, as items)
        _record(heap, routes, d, SlotKind.ITEM, key.value, value)
    for lst in list_state.written_lists(ctx):
        _record(heap, routes, lst, SlotKind.CONTENTS, None, lst)
    emit = _Emitter(ctx, epilogue_trace, routes, without_grad)
    with tracectx(epilogue_trace):
        for step in heap.plan():
            if isinstance(step, Write):  # objects the call made are tracked by object_state, not here: it rebuilds
                emit(step)               # each where a write stores it (epilogue_value), before that write


class _Emitter:
    """Turns the heap's writes into the epilogue's operators, each object reached through the proxy of its first
    route (named in the computation's namespace, as Thunder names its roots)."""

    def __init__(self, ctx: Any, epilogue: TraceCtx, routes: Routes,
                 without_grad: Callable[[Any], bool]) -> None:
        self.ctx, self.epilogue, self.routes, self.without_grad = ctx, epilogue, routes, without_grad
        self.proxies: dict[tuple[int, SlotKind], Proxy] = {}

    def __call__(self, write: Write) -> None:
        route = self.routes[(write.slot.obj, write.slot.kind)]
        if write.slot.kind is SlotKind.ATTR:
            stored = object_state.epilogue_value(write.value, f"{write.route}.{write.slot.key}")
            owner = route.provenance.inputs[0]  # Thunder may have proxied it: that proxy reaches the epilogue
            module_state.SET_ATTRIBUTE(self._proxy(write.slot, owner, getattr(owner, "proxy", None)),
                                       write.slot.key, stored, self.without_grad(stored))
        elif write.slot.kind is SlotKind.ITEM:
            stored = object_state.epilogue_value(write.value, f"{write.route}[{write.slot.key!r}]")
            dict_state.SET_ITEM(self._proxy(write.slot, route.provenance, None), write.slot.key, stored)
        else:
            object_state.write_contents(route)

    def _proxy(self, slot: Slot, record: Any, proxy: Proxy | None) -> Proxy:
        """The epilogue's proxy of the slot's object (``proxy``, or one the prologue fetches along ``record``), once
        per object and kind of slot (an object's ``__dict__`` is written as attributes through the object, and as
        items through the dict: two handles of one object)."""
        obj = (slot.obj, slot.kind)
        if obj not in self.proxies:
            if proxy is None:
                with tracectx(self.ctx.computation_trace):
                    proxy = Proxy(history=record)
            if proxy.name not in self.epilogue.names:
                self.epilogue.add_name(proxy.name)
            self.proxies[obj] = proxy
        return self.proxies[obj]
