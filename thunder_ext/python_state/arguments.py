"""The call's values of a computation's arguments, and which of them are one storage.

Python state is identified by identity, not by access path. Thunder's prologue unpacks every computation argument
by the path the function reached it through — ``args[0]``, ``module.get_parameter('head.weight')``, an attribute,
a dict item — so one tensor reached by two paths (tied weights, ``self.head.weight = self.emb.weight``; a buffer
registered under two names; ``f(model, model.w)``; a dict holding one tensor under two keys) is two arguments of
the computation. Thunder's own aliasing record (``alias_tensor_indices``, part of its cache key) only looks at the
plain tensors of the flattened ``(args, kwargs)``: parameters, buffers and tensors in attributes are not in it.

:func:`argument_values` replays the prologue's unpacking on the call being compiled — every ``unpack_*`` prim,
from the call's ``args``, ``kwargs`` and function object through items, attributes, submodules, parameters and
buffers — so each computation argument is placed on the object it is at run time, whatever path reached it.
:func:`alias_groups_of` groups the tensors among them by storage: these are the argument alias groups every pass
uses (the pipeline's ``input_aliases``, functionalization's synthetic bases, eager's overlap checks), and
:func:`storage_pattern` is what the prologue pins so that a later call where they no longer share storage (or
newly do) does not run a program compiled for the other case (:mod:`thunder_ext.eager.eager_checks`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from thunder.core.module import get_thunder_module
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.trace import TraceCtx

from .referents import DEREFERENCE, dereference

__all__ = ["prologue_values", "argument_values", "epilogue_values", "argument_tensors", "alias_groups_of",
           "storage_pattern"]

_UNPACKS: Mapping[Any, Callable[..., Any]] = {
    PrimIDs.UNPACK_GETITEM: operator.getitem,
    PrimIDs.UNPACK_ATTR: getattr,
    PrimIDs.UNPACK_THUNDER_MODULE: get_thunder_module,
    PrimIDs.UNPACK_PARAMETER: lambda module, name: module.get_parameter(name),
    PrimIDs.UNPACK_BUFFER: lambda module, name: module.get_buffer(name),
    PrimIDs.UNPACK_SUBMODULE: lambda module, name: module.get_submodule(name),
    DEREFERENCE.id: dereference,
}
"""The prologue's unpacking prims with operands, as the generated prologue runs them (Thunder's printers)."""

_UNKNOWN: Any = object()

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
"""Tensors whose storage is read directly (a subclass that wraps others has no storage of its own to compare)."""


def prologue_values(prologue: TraceCtx, fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's value of every proxy the prologue unpacks (by name) from the call's ``args``, ``kwargs`` or the
    function object ``fn`` (see the module docstring)."""
    env: dict[str, Any] = {}
    for bsym in prologue.bound_symbols:
        out = bsym.output
        if not isinstance(out, Proxy):
            continue
        sid = bsym.sym.id
        if sid is PrimIDs.UNPACK_TRIVIAL and out.name in ("args", "kwargs"):
            env[out.name] = tuple(args) if out.name == "args" else dict(kwargs)
        elif sid is PrimIDs.UNPACK_FUNCTION_OBJ:
            env[out.name] = fn
        elif sid in _UNPACKS:
            operands = [env.get(a.name, _UNKNOWN) if isinstance(a, Proxy) else a for a in bsym.args]
            if all(o is not _UNKNOWN for o in operands):
                env[out.name] = _UNPACKS[sid](*operands)
    return env


def argument_values(prologue: TraceCtx, computation: TraceCtx, fn: Any, args: Sequence[Any],
                    kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's value of each computation argument (by name) that the prologue unpacks (:func:`prologue_values`)."""
    return _returned_values(prologue, computation, 0, fn, args, kwargs)


def epilogue_values(prologue: TraceCtx, epilogue: TraceCtx, fn: Any, args: Sequence[Any],
                    kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's value of each epilogue argument (by name) the prologue unpacks (the objects written back)."""
    return _returned_values(prologue, epilogue, 1, fn, args, kwargs)


def _returned_values(prologue: TraceCtx, trace: TraceCtx, which: int, fn: Any, args: Sequence[Any],
                     kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``trace``'s arguments that are the prologue's returned group ``which`` (0: to the computation, 1: to the
    epilogue), by name, as the call's values."""
    env = prologue_values(prologue, fn, args, kwargs)
    returned = prologue.bound_symbols[-1].args[0][which]
    return {arg.name: env[pro.name] for arg, pro in zip(trace.args, returned, strict=False)
            if isinstance(arg, Proxy) and isinstance(pro, Proxy) and pro.name in env}


def argument_tensors(prologue: TraceCtx, computation: TraceCtx, fn: Any, args: Sequence[Any],
                     kwargs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The call's strided tensors (and parameters) by the name of the computation argument they become
    (:func:`argument_values`)."""
    return {name: v for name, v in argument_values(prologue, computation, fn, args, kwargs).items()
            if type(v) in _TENSOR_TYPES and v.layout is torch.strided}


def alias_groups_of(tensors: Mapping[str, torch.Tensor]) -> tuple[frozenset[str], ...]:
    """The names of ``tensors`` grouped by storage, groups of two or more."""
    groups: dict[int, set[str]] = {}
    for name, tensor in tensors.items():
        groups.setdefault(tensor.untyped_storage().data_ptr(), set()).add(name)
    return tuple(frozenset(g) for g in groups.values() if len(g) > 1)


def storage_pattern(tensors: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """Per tensor, the position of the first of ``tensors`` with the same storage: equal patterns, the same
    grouping by storage."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(t.untyped_storage().data_ptr(), k) for k, t in enumerate(tensors))
