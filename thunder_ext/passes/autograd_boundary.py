"""The acquired traces at the autograd boundary: what the compile hook does to prologue, computation and epilogue
right after Thunder acquired them, so that the autograd split sees what eager would record.

:func:`after_acquire` (called by the compile hook, :mod:`thunder_ext.host.patches`) takes Thunder's
``TraceResults`` and returns new ones; every step below takes traces and returns new traces (the same objects when
it changes nothing), keeping each trace's signature, names and provenance:

* **Whether the compilation is differentiated** (:func:`differentiated`). Thunder 0.2.6 splits forward and
  backward whenever an argument requires grad; a computation no output of which can carry a gradient
  (:func:`constant_for_autograd`: an optimizer step, inference under ``torch.no_grad()``) gets arguments without
  grad instead (:func:`_arguments_without_grad`), so it runs as traced, in place, as eager runs it.
* **Functionalization** of a differentiated computation (:mod:`thunder_ext.passes.grad_functionalization`).
* **Each value returned once** (:func:`_dedupe_outputs`): functionalization gives tensors that were different one
  value, and the backward takes one cotangent per value.
* **Outputs without grad** (:func:`_detach_outputs_without_grad`). Thunder connects every output of a
  differentiated computation to autograd; a floating value eager would hold without history (computed under
  no-grad — optimizer state a training step creates — or from nothing that requires grad) is detached in the
  epilogue (:data:`~thunder_ext.passes.functionalize.DETACH_OUTPUT`), before it is returned or stored.
* **Autograd write-backs** (:func:`_thread_writebacks`): a write under grad mode to an input that requires grad, or
  of a value that requires grad, must move the input's autograd history, as eager does. The final value becomes
  an extra output of the computation (so the backward receives its gradient) and the epilogue, which runs after
  the outputs are connected to autograd, performs ``input.copy_(final)`` under ``torch.enable_grad()``
  (:data:`~thunder_ext.passes.functionalize.WRITEBACK`). Eager semantics follow from eager itself: a leaf that
  requires grad raises PyTorch's own "a leaf Variable that requires grad is being used in an in-place operation"
  (before its data changes), a non-leaf's ``grad_fn`` becomes the copy's, and a returned value that *is* the input
  is the input object.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import thunder
from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, ProxyTag, TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceResults, from_trace, tracectx

from ..host.names import SIGINFO
from ..host.state import record_epilogue_writes
from .functionalize import DETACH_OUTPUT, WRITEBACK
from .grad_functionalization import Writeback, functionalize_for_grad, requiring_grad

__all__ = ["after_acquire", "differentiated", "constant_for_autograd"]


def after_acquire(results: TraceResults, input_aliases: Iterable[frozenset[str]]) -> TraceResults:
    """Thunder's acquired traces ``results`` as the autograd split must see them: functionalized when the
    compilation will be differentiated, with its autograd write-backs threaded through the prologue and the
    epilogue (see the module docstring). ``input_aliases`` are the computation's arguments that share storage in
    the call being compiled (:func:`thunder_ext.python_state.arguments.alias_groups_of`). Returns new
    ``TraceResults`` (``results`` itself when nothing changes); ``results`` and its traces are left as they are."""
    from thunder.core.compile_data import get_compile_data

    cd = get_compile_data()
    prologue, computation, epilogue = results.prologue_trace, results.computation_trace, results.epilogue_trace
    if not differentiated(computation):
        if not any(isinstance(a, TensorProxy) and a.requires_grad for a in computation.args):
            return results
        computation = _arguments_without_grad(computation)  # constant for autograd: no forward/backward split
        return TraceResults(prologue, computation, epilogue, results.interpreter_log)
    computation, writebacks = functionalize_for_grad(computation, grad_enabled=bool(cd.is_grad_enabled),
                                                     input_aliases=input_aliases)
    computation, epilogue = _dedupe_outputs(prologue, computation, epilogue)
    epilogue = _detach_outputs_without_grad(prologue, computation, epilogue)
    autograd = [w for w in writebacks if w.autograd]
    if autograd:
        prologue, computation, epilogue = _thread_writebacks(prologue, computation, epilogue, autograd)
        record_epilogue_writes(frozenset(w.input.name for w in autograd))
    return TraceResults(prologue, computation, epilogue, results.interpreter_log)


def differentiated(computation: TraceCtx) -> bool:
    """Whether the compilation in progress will differentiate ``computation``: an argument requires grad and an
    output can carry a gradient (:func:`constant_for_autograd`; such compilations have their arguments' grad
    dropped by :func:`after_acquire`, so Thunder builds no backward). Thunder 0.2.6 splits forward and backward
    whenever an argument requires grad, under ``torch.no_grad()`` too, and the split keeps in the forward only what
    produces outputs."""
    from thunder.core.compile_data import get_compile_data

    cd = get_compile_data()
    if cd is None or cd.disable_torch_autograd_support:
        return False  # no backward will be built (autograd disabled)
    if not any(isinstance(a, TensorProxy) and a.requires_grad for a in computation.args):
        return False
    return not constant_for_autograd(computation)


def constant_for_autograd(computation: TraceCtx) -> bool:
    """Whether no output of ``computation`` can carry a gradient: it writes nothing with grad enabled, and every
    tensor it returns was computed with grad disabled (Thunder tags those ``DETACHED_AUTOGRAD_GRAPH``) or is an
    argument that does not require grad — an
    optimizer step (``torch.optim`` disables grad inside ``step``), inference under ``torch.no_grad()``. Thunder
    would still split forward and backward (its split keeps in the forward only what produces outputs, so writes
    without outputs, ``_foreach_add_(params, ...)``, would land in a backward that never runs)."""
    if _records_a_write(computation.bound_symbols):
        return False  # a write under grad mode may give its destination (an argument, too) a history
    arguments = {a.name: a for a in computation.args if isinstance(a, TensorProxy)}
    returned = tree_flatten((computation.output, computation.bound_symbols[-1].args))[0]
    for out in returned:
        if not isinstance(out, TensorProxy):
            continue
        argument = arguments.get(out.name)
        if argument is not None:
            if argument.requires_grad:
                return False
        elif ProxyTag.DETACHED_AUTOGRAD_GRAPH not in out.tags:
            return False
    return True


def _records_a_write(bsyms: Sequence[BoundSymbol]) -> bool:
    """Whether a ``prims.copy_`` among ``bsyms`` (and their subsymbols) runs with grad enabled (Thunder records the
    grad mode of each copy; ``plain.mul_(w)`` with ``w`` requiring grad gives ``plain`` a history in eager)."""
    return any((b.sym.id is PrimIDs.COPY_ and b.kwargs.get("grad_enabled", True)) or _records_a_write(b.subsymbols)
               for b in bsyms)



def _arguments_without_grad(computation: TraceCtx) -> TraceCtx:
    """``computation`` with tensor arguments that, as Thunder's autograd decision sees them, require no grad: no
    forward/backward split (the program runs as traced, in place, as eager runs it under ``no_grad``)."""
    from thunder.core.trace import detached_trace

    new = _copy(computation)
    new.bound_symbols = list(computation.bound_symbols)
    with detached_trace():  # the same names, in a scratch trace
        new.args = [a.replace(requires_grad=False) if isinstance(a, TensorProxy) and a.requires_grad else a
                    for a in computation.args]
    return new


# --- new traces ---------------------------------------------------------------------------------------------
def _copy(trace: TraceCtx) -> TraceCtx:
    """A new trace with ``trace``'s signature, names and provenance, without bound symbols yet (proxies made in it
    continue ``trace``'s names)."""
    new = from_trace(trace)
    new.set_provenance(trace.get_provenance())
    return new


def _with_return(trace: TraceCtx, value: Any) -> TraceCtx:
    """``trace`` returning ``value`` instead."""
    new = _copy(trace)
    new.bound_symbols = [*trace.bound_symbols[:-1], prims.python_return.bind(value, output=None)]
    return new


def _set_parameters(epilogue: TraceCtx, params: list[Proxy]) -> None:
    """Make ``params`` the parameters of ``epilogue`` (a new trace), in its signature too."""
    epilogue.args = params
    signature = copy.copy(SIGINFO.get(epilogue))  # shared with the trace it was made from
    signature.args = [(p.name, None) for p in params]
    SIGINFO.set(epilogue, signature)


def _prologue_to_epilogue(prologue: TraceCtx) -> int:
    """How many values the prologue passes to the epilogue (the epilogue's first parameters; the computation's
    outputs follow)."""
    return len(prologue.bound_symbols[-1].args[0][1])


# --- outputs ------------------------------------------------------------------------------------------------
def _dedupe_outputs(prologue: TraceCtx, computation: TraceCtx, epilogue: TraceCtx) -> tuple[TraceCtx, TraceCtx]:
    """Return each value once from the computation: functionalization gives values that were different tensors
    one value (``t = a.mul_(b); return t, a``), and the backward takes one cotangent per value. Repeated outputs
    become repeated uses of one epilogue parameter. Returns the computation and the epilogue."""
    outputs = tuple(computation.bound_symbols[-1].args[0])
    n_pro = _prologue_to_epilogue(prologue)
    params = list(epilogue.args)
    first: dict[int, int] = {}
    swap: dict[Any, Proxy] = {}
    for k, out in enumerate(outputs):
        j = first.setdefault(id(out), k)
        if j != k:
            swap[variableify(params[n_pro + k])] = params[n_pro + j]
    if not swap:
        return computation, epilogue
    kept = sorted(first.values())
    dropped = {params[n_pro + k].name for k in range(len(outputs)) if k not in kept}
    new = _copy(epilogue)
    new.bound_symbols = [b.from_bsym_swap_proxies(swap) for b in epilogue.bound_symbols
                         if not (b.sym.id is PrimIDs.UNPACK_TRIVIAL and b.output.name in dropped)]
    _set_parameters(new, params[:n_pro] + [params[n_pro + k] for k in kept])
    return _with_return(computation, tuple(outputs[k] for k in kept)), new


def _detach_outputs_without_grad(prologue: TraceCtx, computation: TraceCtx, epilogue: TraceCtx) -> TraceCtx:
    """Thunder connects every output of a differentiated computation to autograd (one ``autograd.Function``), so a
    floating tensor it computed that eager would hold without history — optimizer state created under ``no_grad``
    inside a training step, a value computed under ``no_grad`` or from arguments that do not require grad — came
    back requiring grad, with a ``grad_fn`` into this call's graph (a later loss reaching it backpropagated into a
    freed graph). The epilogue detaches each such output (:data:`DETACH_OUTPUT`, once per value, before any use:
    returned and stored values stay one tensor); arguments returned as they are keep their identity. Returns the
    epilogue."""
    flat_args, _ = tree_flatten((computation.args, computation.kwargs))
    grad = requiring_grad(computation.bound_symbols, flat_args)
    arguments = {a.name for a in flat_args if isinstance(a, Proxy)}
    n_pro = _prologue_to_epilogue(prologue)
    params = [epilogue.args[n_pro + k] for k, out in enumerate(computation.bound_symbols[-1].args[0])
              if (isinstance(out, TensorProxy) and thunder.dtypes.is_inexact_dtype(out.dtype)
                  and out.name not in grad and out.name not in arguments)]
    if not params:
        return epilogue
    new = _copy(epilogue)
    with tracectx(new):
        detached = [TensorProxy(like=param, requires_grad=False) for param in params]
    detaches = [DETACH_OUTPUT.bind(param, output=d) for param, d in zip(params, detached, strict=True)]
    swap = {variableify(param): d for param, d in zip(params, detached, strict=True)}
    body = epilogue.bound_symbols
    unpacked = next((k for k, b in enumerate(body) if b.sym.id is not PrimIDs.UNPACK_TRIVIAL), len(body))
    new.bound_symbols = (body[:unpacked] + detaches + [b.from_bsym_swap_proxies(swap) for b in body[unpacked:]])
    return new


# --- autograd write-backs -----------------------------------------------------------------------------------
def _thread_writebacks(prologue: TraceCtx, computation: TraceCtx, epilogue: TraceCtx,
                       writebacks: Sequence[Writeback]) -> tuple[TraceCtx, TraceCtx, TraceCtx]:
    """Pass each written input from the prologue to the epilogue and its final value from the computation to the
    epilogue (once: an output proxy appears once among the outputs, or the backward would see only one of its
    cotangents), and write it there with :data:`WRITEBACK`. Returns the prologue, the computation and the
    epilogue."""
    outputs = tuple(computation.bound_symbols[-1].args[0])
    position = {id(out): k for k, out in reversed(list(enumerate(outputs)))}
    extra: list[Any] = []
    for w in writebacks:
        if id(w.final) not in position:
            position[id(w.final)] = len(outputs) + len(extra)
            extra.append(w.final)
    pro_to_comp, pro_to_epi = prologue.bound_symbols[-1].args[0]
    inputs = tuple(pro_to_comp[w.position] for w in writebacks)
    new_epilogue = _writing_back(epilogue, len(pro_to_epi), writebacks, extra,
                                 [position[id(w.final)] for w in writebacks])
    return (_with_return(prologue, (pro_to_comp, tuple(pro_to_epi) + inputs)),
            _with_return(computation, outputs + tuple(extra)), new_epilogue)


def _writing_back(epilogue: TraceCtx, n_pro: int, writebacks: Sequence[Writeback], extra: Sequence[Any],
                  finals: Sequence[int]) -> TraceCtx:
    """``epilogue`` taking the written inputs after the prologue's values and the ``extra`` outputs of the
    computation after its outputs, writing back each input from the computation's output ``finals[k]``; a
    returned final value becomes the input itself (eager returns the mutated tensor)."""
    old_args = list(epilogue.args)
    new = _copy(epilogue)
    with tracectx(new):
        ep_inputs = [TensorProxy(like=w.input, requires_grad=w.input.requires_grad) for w in writebacks]
        ep_extra = [TensorProxy(like=f, requires_grad=f.requires_grad) for f in extra]
    comp_params = old_args[n_pro:] + ep_extra  # the epilogue's parameters for the computation's outputs
    unpacks = [prims.unpack_trivial.bind(p, name=p.name, output=p) for p in (*ep_inputs, *ep_extra)]
    body = list(epilogue.bound_symbols)
    ep_return = body.pop()
    writes = [WRITEBACK.bind(ep_input, comp_params[k], output=None) for k, ep_input in zip(finals, ep_inputs,
                                                                                            strict=True)]
    same = {variableify(comp_params[k]): ep_input for k, ep_input in zip(finals, ep_inputs, strict=True)}
    new.bound_symbols = unpacks + body + writes + [ep_return.from_bsym_swap_proxies(same)]
    _set_parameters(new, old_args[:n_pro] + ep_inputs + comp_params)
    return new
