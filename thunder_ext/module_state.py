"""Module attributes rebound inside a jitted function are written back, like any other state, on every call.

``self.count = self.count + 1`` in ``forward`` rebinds an attribute (the tensor is replaced, not mutated). Thunder's
interpreter records the assignment and ``process_recorded_modifications`` turns it into an epilogue write, but in
0.2.6 it loses two of the three cases, silently:

* a **buffer of the root module**: the name is joined as ``".count"``, so ``ThunderModule.set_buffer`` files the
  new tensor under a name nothing reads — every call starts from the stale buffer;
* a **plain tensor attribute** (not a registered buffer: the module's ``__dict__``): the write is dropped when the
  object has no proxy (the root module, submodules);
* a buffer of a submodule (``"inner.count"``) reaches the ``ThunderModule``'s overrides, which later calls read, but
  never the original module.

:func:`write_back_module_state` stands in for ``process_recorded_modifications`` (installed by
:mod:`thunder_ext._patches`): after Thunder's own pass it replaces every buffer write by :data:`SET_BUFFER` under its
right name, and adds a :data:`SET_ATTRIBUTE` for every ``__dict__`` assignment Thunder dropped. Both write the
original module (through ``ThunderModule.get_submodule``, which hands out the original submodules) and, for
buffers, the ``ThunderModule``'s override that later calls read — so later calls *and* the original module see the
new tensor, as in eager. Both are epilogue operators ordered on the ``global`` resource (Python object state), like
Thunder's ``pack_buffer``. Cost: one pass over the recorded modifications and the epilogue, at trace time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from effects import GLOBAL, make_effects

from thunder.core.interpreter import PseudoInst
from thunder.core.module import ThunderModule
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.trace import TraceCtx

from ._thunder import ADDITIONAL_OUTPUTS
from . import dict_state
from .opaque_torch import executor

__all__ = ["SET_BUFFER", "SET_ATTRIBUTE", "write_back_module_state"]


def _original(module: Any) -> Any:
    """The module eager code would have assigned to: a ``ThunderModule`` stands for its original model."""
    return module.get_submodule("") if isinstance(module, ThunderModule) else module


def _set_buffer(root: Any, name: str, value: Any) -> None:
    owner, _, attr = name.rpartition(".")
    if isinstance(root, ThunderModule):
        root.set_buffer(name, value)
    setattr(_original(root).get_submodule(owner), attr, value)


def _set_attribute(obj: Any, name: str, value: Any) -> None:
    setattr(_original(obj), name, value)


def _write_meta(obj: Any, name: str, value: Any) -> None:
    return None


_OBJECT_STATE = make_effects(resources=[GLOBAL])

SET_BUFFER = executor.register_operator("thunder_effects_set_buffer", meta=_write_meta, fn=_set_buffer,
                                        effects=_OBJECT_STATE)
"""``set_buffer(root, "inner.count", value)``: the buffer of ``root``'s submodule ``inner`` is now ``value`` (and the
``ThunderModule``'s override too)."""

SET_ATTRIBUTE = executor.register_operator("thunder_effects_set_attribute", meta=_write_meta, fn=_set_attribute,
                                           effects=_OBJECT_STATE)
"""``set_attribute(obj, "count", value)``: ``setattr`` on the object (the original module for a ``ThunderModule``)."""


def _dropped_attribute_writes(ctx: Any) -> list[tuple[Any, str, Any]]:
    """``(object provenance, name, value)`` of each last assignment to an object's ``__dict__`` that Thunder drops
    (the object has no proxy)."""
    found = []
    for modified, modifications in ADDITIONAL_OUTPUTS.get(ctx).items():
        record = modified.provenance
        if not (record.inst is PseudoInst.LOAD_ATTR and len(record.inputs) == 2
                and record.inputs[1].inst is PseudoInst.CONSTANT and record.inputs[1].value == "__dict__"):
            continue
        owner = record.inputs[0]
        if hasattr(owner, "proxy"):
            continue  # Thunder writes it back itself (pack_attr)
        last = {}
        for inst, *args in modifications:
            if inst is PseudoInst.STORE_SUBSCR:
                _, key, value = args
                last[key.value] = value.value
        found += [(owner, name, value) for name, value in last.items() if isinstance(value, Proxy)]
    return found


def write_back_module_state(original: Callable[..., Any], ctx: Any, epilogue_trace: TraceCtx) -> None:
    """Stand-in for ``jit_ext.process_recorded_modifications`` (``original``): Thunder's epilogue writes, with
    buffer writes named right and reaching the original module, plus the attribute writes Thunder drops."""
    dropped = _dropped_attribute_writes(ctx)
    original(ctx, epilogue_trace)
    bsyms = []
    for bsym in epilogue_trace.bound_symbols:
        if bsym.sym.id is PrimIDs.PACK_BUFFER:
            root, name, value = bsym.args
            bsym = SET_BUFFER.bind(root, name.lstrip("."), value, output=None)
        bsyms.append(bsym)
    roots: dict[Any, Proxy] = {}
    for owner, name, value in dropped:
        if owner not in roots:
            roots[owner] = Proxy(history=owner)
            epilogue_trace.add_name(roots[owner].name)
        bsyms.append(SET_ATTRIBUTE.bind(roots[owner], name, value, output=None))
    epilogue_trace.bound_symbols = bsyms
    dict_state.write_back(ctx, epilogue_trace)
