"""Objects reached by calling a weak reference are state like any object reachable from the arguments.

``torch.optim.lr_scheduler.LRScheduler`` replaces ``optimizer.step`` by a plain function that closes over a
``weakref.ref`` to the optimizer (``opt = opt_ref(); opt._opt_called = True; return func.__get__(opt)(...)``), so
``jit(opt.step)`` with a scheduler attached reaches the optimizer only through a call of that reference. Thunder's
interpreter records such a call as ``OPAQUE`` — a value the prologue cannot fetch again — so the first call failed
("Exception occured unpacking object from ProvenanceRecord(... OPAQUE ...)"), or, where nothing had to be unpacked,
writes into the optimizer's dicts (the momentum buffer, Adam's moments) went into the real dicts as proxies: every
later step behaved like the first.

Here the call of a weak reference (``weakref.ref.__call__``, and so ``WeakMethod`` and ``weakref.finalize``'s
lookups, which call it) is looked aside to (:func:`lookasides`): the interpreter dereferences it as eager does, and
gives the referent the provenance ``ref[REFERENT]`` — a subscript of the reference by a constant, which the rest of
the integration already treats as reachable (:func:`thunder_ext.python_state.dict_state.reachable`): reads through it
are guarded
inputs of the prologue (``opt.param_groups[0]["lr"]``, the state tensors), writes into its dicts and attributes are
written back by the epilogue, and tensors are the same proxies however they are reached (by identity: the
parameters in ``param_groups`` are the keys of ``state``). Thunder's prologue builder unpacks that record as
``unpack_getitem(ref, REFERENT)``; :func:`resolve_in_prologue` (run on every acquired prologue by
:mod:`thunder_ext.host.patches`) replaces each such unpacking by :data:`DEREFERENCE`, which calls the run's reference
and raises :class:`ReferentDiedError` when its object is gone. Cost at trace time: one lookaside per call of a
reference and one pass over the prologue's bound symbols; at run time one call of the reference per path.

A tensor is one object however it is reached: the referent of a reference to a tensor the trace already holds (a
module's parameter read as an attribute before, as ``nn.LSTM``'s ``_weights_have_changed`` does:
``ref() is not self.weight_ih_l0``) is that tensor's proxy, the interpreter's wrapper of it, so identity answers as
eager (Thunder proxies a tensor once per path, so ``ref() is weight`` was ``False`` and the module re-flattened its
weights, calling ``weakref.ref`` on a proxy: "KeyError: None"). The answer holds for the run it was traced on only
if the reference still points to that object, and ``False`` only if it points to none of the tensors held: the
prologue checks it (:data:`SAME_REFERENT`; a call where it differs misses the cache and is traced again). A
tensor first reached through the reference and later by another path gets its own proxy (Thunder's order: the
two compare unequal by identity there). A weak reference *made* inside the function to a tensor of the trace has no
run-time object to point to: :class:`WeakReferenceToTensorError` names the fix (Thunder failed with "KeyError:
None" making an opaque operator of ``weakref.ref.__new__``).

A reference already dead when the function is traced dereferences to ``None`` as in eager, as Thunder's own
opaque call does (nothing of it reaches the prologue).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from thunder.core.interpreter import (ProvenanceRecord, PseudoInst, WrappedValue, do_raise, get_interpreterruntimectx,
                                      wrap, wrap_const)
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.executors.pythonex import ex as pythonex

from ..host.names import PROXIED_VALUES

__all__ = ["REFERENT", "DEREFERENCE", "SAME_REFERENT", "dereference", "ReferentDiedError", "ReferentChanged",
           "WeakReferenceToTensorError",
           "lookasides", "resolve_in_prologue"]

REFERENT = "thunder_effects_referent"
"""The constant key of the provenance ``ref[REFERENT]`` a dereferenced object gets (an identifier: it becomes
part of the names of the proxies read through it)."""


class ReferentDiedError(RuntimeError):
    """The object a weak reference pointed to when the function was traced is gone at run time."""


class WeakReferenceToTensorError(NotImplementedError):
    """``weakref.ref(t)`` inside a jitted function, ``t`` a tensor of the trace."""


class ReferentChanged(RuntimeError):
    """A prologue check: a weak reference no longer points to the tensor it pointed to when traced."""


def dereference(ref: Any) -> Any:
    found = ref() if isinstance(ref, weakref.ref) else None
    if found is None:
        raise ReferentDiedError(
            f"thunder_ext.jit: the function reads an object through the weak reference {ref!r}, whose object no "
            "longer exists (an LR scheduler's optimizer, collected). Keep the object alive while the jitted "
            "function is used, or jit the function again.")
    return found


def _dereference_meta(ref: Any) -> Any:
    raise NotImplementedError("bound directly in the prologue, never traced")


DEREFERENCE = pythonex.register_operator("thunder_effects_dereference", meta=_dereference_meta, fn=dereference)
"""Prologue: the object a weak reference points to at run time (:class:`ReferentDiedError` when it is gone)."""


def _check_identity(referent: Any, same: bool, *tensors: Any) -> None:
    if (referent is tensors[0]) if same else not any(referent is t for t in tensors):
        return
    raise ReferentChanged("a weak reference points to another tensor than when the function was traced")


def _none_meta(referent: Any, same: bool, *tensors: Any) -> None:
    return None


SAME_REFERENT = pythonex.register_operator("thunder_effects_check_referent", meta=_none_meta, fn=_check_identity)
"""Prologue check: the run's referent of a reference is the tensor the trace identified it with (``same``), or none
of the tensors the trace held when it was dereferenced (``not same``)."""


def _held_wrapper(found: Any, record: ProvenanceRecord) -> WrappedValue | None:
    """The interpreter's wrapper of the tensor ``found`` when the trace already holds a proxy of it, ``None``
    otherwise; the identity checked at run time (:data:`SAME_REFERENT`)."""
    if not isinstance(found, torch.Tensor):
        return None
    wrappers = [w for w in PROXIED_VALUES.get(get_interpreterruntimectx()) if isinstance(w.value, TensorProxy)]
    held = next((w for w in wrappers if w.original_value is found), None)
    if held is not None:
        get_jit_ctx().add_constraint((SAME_REFERENT, Proxy(history=record), True, held.value))
    elif wrappers:
        get_jit_ctx().add_constraint((SAME_REFERENT, Proxy(history=record), False, *(w.value for w in wrappers)))
    return held


def _call_reference(ref: WrappedValue, *args: Any, **kwargs: Any) -> Any:
    """``ref()`` in the interpreter: the referent, fetched again by the prologue through ``ref[REFERENT]``."""
    try:
        found = weakref.ref.__call__(ref.value, *(a.value for a in args), **{k: v.value for k, v in kwargs.items()})
    except Exception as e:
        return do_raise(e)
    if found is None:
        return wrap_const(None)
    key = wrap_const(REFERENT).provenance
    record = ProvenanceRecord(PseudoInst.BINARY_SUBSCR, inputs=[ref.provenance, key])
    return _held_wrapper(found, record) or wrap(found, provenance=record)


def _new_reference(cls: WrappedValue, obj: WrappedValue, *args: Any, **kwargs: Any) -> Any:
    """``weakref.ref(obj)`` in the interpreter: made as eager makes it, unless ``obj`` is a tensor of the trace."""
    if isinstance(obj.value, Proxy):
        return do_raise(WeakReferenceToTensorError(
            f"thunder_ext.jit: weakref.ref({obj.value.name}) makes a weak reference to a tensor inside the jitted "
            "function, which has no tensor to point to at run time. Make the reference outside the jitted "
            "function."))
    try:
        made = weakref.ref.__new__(cls.value, obj.value, *(a.value for a in args),
                                   **{k: v.value for k, v in kwargs.items()})
    except Exception as e:
        return do_raise(e)
    return wrap_const(made)


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`)."""
    return {weakref.ref.__call__: _call_reference, weakref.ref.__new__: _new_reference}


def resolve_in_prologue(prologue: TraceCtx) -> list[BoundSymbol]:
    """The bound symbols of ``prologue`` with each unpacking ``ref[REFERENT]`` made :data:`DEREFERENCE` of ``ref``."""
    return [DEREFERENCE.bind(bsym.args[0], output=bsym.output) if _unpacks_referent(bsym) else bsym
            for bsym in prologue.bound_symbols]


def _unpacks_referent(bsym: BoundSymbol) -> bool:
    key = bsym.args[1] if bsym.sym.id is PrimIDs.UNPACK_GETITEM and len(bsym.args) == 2 else None
    return isinstance(key, str) and key == REFERENT
