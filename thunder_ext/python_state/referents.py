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

A reference already dead when the function is traced dereferences to ``None`` as in eager, as Thunder's own
opaque call does (nothing of it reaches the prologue).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from thunder.core.interpreter import ProvenanceRecord, PseudoInst, WrappedValue, do_raise, wrap, wrap_const
from thunder.core.prims import PrimIDs
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.executors.pythonex import ex as pythonex

__all__ = ["REFERENT", "DEREFERENCE", "dereference", "ReferentDiedError", "lookasides", "resolve_in_prologue"]

REFERENT = "thunder_effects_referent"
"""The constant key of the provenance ``ref[REFERENT]`` a dereferenced object gets (an identifier: it becomes
part of the names of the proxies read through it)."""


class ReferentDiedError(RuntimeError):
    """The object a weak reference pointed to when the function was traced is gone at run time."""


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


def _call_reference(ref: WrappedValue, *args: Any, **kwargs: Any) -> Any:
    """``ref()`` in the interpreter: the referent, fetched again by the prologue through ``ref[REFERENT]``."""
    try:
        found = weakref.ref.__call__(ref.value, *(a.value for a in args), **{k: v.value for k, v in kwargs.items()})
    except Exception as e:
        return do_raise(e)
    if found is None:
        return wrap_const(None)
    key = wrap_const(REFERENT).provenance
    return wrap(found, provenance=ProvenanceRecord(PseudoInst.BINARY_SUBSCR, inputs=[ref.provenance, key]))


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`)."""
    return {weakref.ref.__call__: _call_reference}


def resolve_in_prologue(prologue: TraceCtx) -> list[BoundSymbol]:
    """The bound symbols of ``prologue`` with each unpacking ``ref[REFERENT]`` made :data:`DEREFERENCE` of ``ref``."""
    return [DEREFERENCE.bind(bsym.args[0], output=bsym.output) if _unpacks_referent(bsym) else bsym
            for bsym in prologue.bound_symbols]


def _unpacks_referent(bsym: BoundSymbol) -> bool:
    key = bsym.args[1] if bsym.sym.id is PrimIDs.UNPACK_GETITEM and len(bsym.args) == 2 else None
    return isinstance(key, str) and key == REFERENT
