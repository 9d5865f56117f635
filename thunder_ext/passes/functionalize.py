"""Effect functionalization of Thunder traces, so that value transforms (autograd) see every mutation.

Thunder differentiates, splits and rematerializes by dataflow. With the effect pipeline (no ``update_aliases``
threading) a write is a side effect nothing downstream reads, so ``h.relu_()`` does not exist for autograd. When a
compilation will be differentiated (an argument requires grad), :func:`functionalize_for_grad` rewrites the freshly
acquired computation trace with :func:`effects.functionalize`, before anything else looks at it:

1. **Writers are flattened** to the prims that write: Thunder traces every in-place op as its functional
   decomposition plus ``prims.copy_(new, dst)`` (``ltorch.relu_`` = ``relu`` + ``copy_``; ``setitem_``,
   ``batch_norm``'s running statistics, ``F.relu(inplace=True)`` alike), so composites that write are replaced by
   their subsymbols, recursively, down to the writing prims.
2. :func:`effects.functionalize` with :class:`ThunderRules`: ``copy_(new, dst)`` means "``dst``'s new value is
   ``new``"; a write through a view is scattered into its base by inverting the view's prims one by one
   (``slice_prim`` → ``pad`` + ``where``, ``transpose`` → the inverse permutation, ``reshape``/``squeeze``/a
   non-expanding ``broadcast_in_dim`` → ``reshape`` back, ``shallow_copy`` → itself); stale views are replayed by
   calling their symbol again on the new base; writers without subsymbols (opaque torch ops) run on clones.
3. **No-grad writes keep autograd identity.** In eager, ``with torch.no_grad(): w.mul_(2)`` changes ``w``'s data
   but not its place in the autograd graph: later uses of ``w`` still differentiate to ``w``. So a root written
   under no-grad gets its new value through :data:`NO_GRAD_UPDATE` (forward: the new value; backward: the
   gradient passes straight to the old value) — what the effect of "a write autograd does not see" means for
   values.
4. **Inputs** are written back after the program (the epilogue of :func:`effects.functionalize`):

   * a *data* write-back — the input and its final value do not require grad, or every write to it happened under
     no-grad (optimizer steps, running statistics, caches) — is a ``prims.copy_`` at the end of the computation,
     where the effect pipeline, fusion and reinplacing treat it like any in-place update;
   * an *autograd* write-back — a write under grad mode to an input that requires grad, or of a value that
     requires grad — must move the input's autograd history, as eager does. The final value becomes an extra
     output of the computation (so the backward receives its gradient) and the epilogue, which runs after the
     outputs are connected to autograd, performs ``input.copy_(final)`` under ``torch.enable_grad()``
     (:data:`WRITEBACK`). Eager semantics follow from eager itself: a leaf that requires grad raises PyTorch's own
     "a leaf Variable that requires grad is being used in an in-place operation" (before its data changes), a
     non-leaf's ``grad_fn`` becomes the copy's, and a returned value that *is* the input is the input object.

5. **Outputs without grad.** Thunder connects every output of a differentiated computation to autograd; a floating
   value eager would hold without history (computed under no-grad — optimizer state a training step creates — or
   from nothing that requires grad) is detached in the epilogue (:data:`DETACH_OUTPUT`), before it is returned or
   stored.

A tensor saved for backward and mutated later gets the mathematically correct gradient (the functional program
saves the value it read), where eager raises "one of the variables needed for gradient computation has been
modified by an inplace operation".

Arguments that share storage at run time and are written are not handled yet: the compilation raises
:class:`~effects.errors.FunctionalizationError` naming the arguments (clone one of them before the call).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import effects
from effects import Const, Effects, FunctionalizationError, Instruction, Rules, functionalize, gc_paused, operand_values

import thunder
from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, ProxyTag, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

import thunder.torch as ltorch

from ..host.names import SIGINFO
from ..declare.adapter import AdaptedTrace, adapt_bsyms
from ..declare.resolve import bsym_effects
from ..host.state import record_epilogue_writes

__all__ = ["ThunderRules", "functionalize_for_grad", "written_arguments", "Writeback", "NO_GRAD_UPDATE", "WRITEBACK",
           "DETACH_OUTPUT", "STORED"]


# --- the two symbols functionalization adds ------------------------------------------------------------------
def _no_grad_update_meta(old: TensorProxy, new: TensorProxy) -> TensorProxy:
    return prims.shallow_copy(new)


NO_GRAD_UPDATE = Symbol(name="thunder_effects_no_grad_update", meta=_no_grad_update_meta,
                        id="thunder_effects_no_grad_update", is_prim=False)
"""``old``'s storage now holds ``new`` by a write autograd does not record: the value is ``new``, the gradient
flows to ``old`` unchanged (a composite of ``shallow_copy(new)`` with its own gradient rule)."""


def _no_grad_update_grad(old: TensorProxy, new: TensorProxy) -> TensorProxy:
    from thunder.core.transforms import get_grad, put_grad

    out = NO_GRAD_UPDATE(old, new)
    put_grad(old, get_grad(out))
    return out




def _writeback_impl(dst: torch.Tensor, src: torch.Tensor) -> None:
    with torch.enable_grad():
        dst.copy_(src)


def _writeback_meta(dst: TensorProxy, src: TensorProxy) -> None:
    return None


def _alias_index_impl(*members: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """For arguments sharing storage: per element of each member, the position (in the members' concatenated
    elements) of the first element at the same memory location."""
    offsets = []
    for m in members:
        off = torch.full(tuple(m.shape), m.storage_offset(), dtype=torch.int64,  # type: ignore[arg-type]
                         device=m.device)  # (an int: m is a real tensor)
        for d, (size, stride) in enumerate(zip(m.shape, m.stride(), strict=True)):
            shape = [1] * m.ndim
            shape[d] = size
            off = off + (torch.arange(size, device=m.device) * stride).reshape(shape)
        offsets.append(off.reshape(-1))
    flat = torch.cat(offsets)
    _, group = torch.unique(flat, return_inverse=True)
    positions = torch.arange(flat.numel(), device=flat.device)
    first = torch.full((int(group.max()) + 1,), flat.numel(), device=flat.device).scatter_reduce(
        0, group, positions, "amin")
    canonical = first[group]
    out, start = [], 0
    for m in members:
        out.append(canonical[start:start + m.numel()].reshape(m.shape))
        start += m.numel()
    return tuple(out)


def _alias_index_meta(*members: TensorProxy) -> tuple[TensorProxy, ...]:
    return tuple(TensorProxy(like=m, dtype=thunder.dtypes.int64, requires_grad=False) for m in members)


def _detach_meta(t: TensorProxy) -> TensorProxy:
    return TensorProxy(like=t, requires_grad=False)


def _make_operators() -> tuple[Symbol, Symbol, Symbol]:
    from ..declare.opaque_torch import executor

    writeback = executor.register_operator(
        "thunder_effects_writeback", meta=_writeback_meta, fn=_writeback_impl,
        effects=Effects(operands=(effects.OperandEffect(0, effects.Access.WRITE),
                                  effects.OperandEffect(1, effects.Access.READ))))
    alias_index = executor.register_operator("thunder_effects_alias_index", meta=_alias_index_meta,
                                             fn=_alias_index_impl, effects=effects.PURE)
    detach = executor.register_operator("thunder_effects_detach", meta=_detach_meta, fn=torch.Tensor.detach,
                                        effects=effects.make_effects(aliases=[(0, 0)]))
    return writeback, alias_index, detach


WRITEBACK, ALIAS_INDEX, DETACH_OUTPUT = _make_operators()


def _register_grads() -> None:
    from thunder.core.transforms import register_grad

    register_grad(NO_GRAD_UPDATE, _no_grad_update_grad)
    register_grad(ALIAS_INDEX, ALIAS_INDEX)  # integer positions: no gradient to give


_register_grads()
"""``WRITEBACK``: the epilogue's ``dst.copy_(src)`` under ``torch.enable_grad()`` (eager's in-place semantics, leaf
check included). ``ALIAS_INDEX``: for arguments sharing storage, which of their elements are one memory location
(:func:`_alias_index_impl`), the index of the synthetic base they become views of. ``DETACH_OUTPUT``: the epilogue's
``detach`` of a computed output eager would hold without autograd history (:func:`_detach_outputs_without_grad`)."""


# --- flattening writers --------------------------------------------------------------------------------------
def _writes(bsym: BoundSymbol) -> bool:
    eff = bsym_effects(bsym)
    return eff.opaque or bool(eff.written)


def _flatten_writers(bsyms: Iterable[BoundSymbol], side_effects: set[int], top: BoundSymbol | None = None,
                     ) -> list[BoundSymbol]:
    """Replace every composite that writes by its subsymbols, recursively, down to the writing prims (and
    writers without subsymbols). A ``copy_`` whose result the outermost composite does not hand back (its
    ``id`` is added to ``side_effects``) is a kernel's side effect — ``batch_norm`` updating its running
    statistics — which autograd never records; ``relu_``, ``setitem_`` and the like return what they wrote."""
    out: list[BoundSymbol] = []
    for bsym in bsyms:
        outer = top or bsym
        if bsym.subsymbols and _writes(bsym):
            out += _flatten_writers(bsym.subsymbols, side_effects, outer)
            continue
        if outer is not bsym and bsym.sym.id is PrimIDs.COPY_:
            handed_back = {o.name for o in outer.flat_proxy_outs}
            if not {o.name for o in bsym.flat_proxy_outs} & handed_back:
                side_effects.add(id(bsym))
        out.append(bsym)
    return out


# --- instructions the materializer runs ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class Call:
    """An instruction op: call ``fn`` on the resolved operands (proxies, constants) inside the new trace."""

    fn: Callable[..., Any]
    label: str
    raw: bool = False
    """Reads the arguments as passed, never a clone made for an autograd write-back (their memory layout)."""

    def __str__(self) -> str:
        return self.label


def _same(value: Any) -> Any:
    return value


if not hasattr(ProxyTag, "THUNDER_EFFECTS_STORED"):
    ProxyTag.register_tag("THUNDER_EFFECTS_STORED")
STORED = ProxyTag.THUNDER_EFFECTS_STORED
"""Tag of a value an in-place write stores in low-precision (bfloat16/float16) storage, which the functional program
reads in its place: eager reads it back rounded, so :mod:`thunder_ext.passes.rounding` keeps its reads out of the
``torch.compile`` region that computed it."""

_LOW_PRECISION = (thunder.dtypes.bfloat16, thunder.dtypes.float16)

SAME = Call(_same, "same")
"""The new value *is* the operand (``copy_(new, dst)``: ``dst``'s new value is ``new``); emits nothing."""


# --- view inverses on prims ----------------------------------------------------------------------------------
def _leaves(bsym: BoundSymbol) -> list[BoundSymbol]:
    if not bsym.subsymbols:
        return [bsym]
    return [leaf for sub in bsym.subsymbols for leaf in _leaves(sub)]


def _narrow_as_slice(bsym: BoundSymbol) -> list[BoundSymbol]:
    """``narrow(a, dim, start, length)`` (a torch op Thunder runs without a decomposition) as its ``slice_prim``."""
    a, dim, start, length = (*bsym.args, *bsym.kwargs.values())[:4]
    dim %= a.ndim
    starts = [start if d == dim else 0 for d in range(a.ndim)]
    ends = [start + length if d == dim else a.shape[d] for d in range(a.ndim)]
    return [prims.slice_prim.bind(a, starts, ends, [1] * a.ndim, output=bsym.output)]


def _detach_as_alias(bsym: BoundSymbol) -> list[BoundSymbol]:
    """``detach(a)`` shares ``a``'s storage: for values it is ``shallow_copy``."""
    a = (*bsym.args, *bsym.kwargs.values())[0]
    return [prims.shallow_copy.bind(a, output=bsym.output)]


DETACH = "torch.detach"
"""Thunder's id of ``Tensor.detach``: a view autograd does not see through (writes through it are no-grad)."""

_UNDECOMPOSED_VIEWS: dict[Any, Callable[[BoundSymbol], list[BoundSymbol]]] = {
    "torch.narrow": _narrow_as_slice,
    DETACH: _detach_as_alias,
}
"""View symbols Thunder runs without a decomposition, as the view prims they amount to."""


def _view_chain(bsym: BoundSymbol, parent: Hashable, output: Hashable) -> list[BoundSymbol] | None:
    """The view prims leading from proxy ``parent`` to proxy ``output`` inside ``bsym`` (in order), or ``None``
    when the decomposition is not a chain of invertible view prims."""
    if not bsym.subsymbols and bsym.sym.id in _UNDECOMPOSED_VIEWS:
        return _UNDECOMPOSED_VIEWS[bsym.sym.id](bsym)
    producer = {o.name: leaf for leaf in _leaves(bsym) for o in leaf.flat_proxy_outs}
    chain = []
    name = output
    while name != parent:
        leaf = producer.get(name)
        if leaf is None or leaf.sym.id not in _INVERSES:
            return None
        chain.append(leaf)
        name = leaf.args[0].name
    return chain[::-1]


def _inverse_slice(leaf: BoundSymbol, before: TensorProxy, new: TensorProxy) -> TensorProxy:
    a, start = leaf.args[0], leaf.args[1]  # args[2], the end, follows from start, strides and new.shape
    strides = leaf.args[3] if len(leaf.args) > 3 and leaf.args[3] is not None else [1] * a.ndim
    config = []
    for length, lo, size, step in zip(a.shape, start, new.shape, strides, strict=True):
        covered = lo + (size - 1) * step + 1 if size else lo
        config.append((lo, length - covered, step - 1))
    padded = _pad(new, config)
    mask = _pad(ltorch.full_like(new, True, dtype=thunder.dtypes.bool8), config)
    return ltorch.where(mask, padded, before)


def _pad(t: TensorProxy, config: list[tuple[int, int, int]]) -> TensorProxy:
    zero: Any = (False if t.dtype is thunder.dtypes.bool8 else
                 0 if not thunder.dtypes.is_inexact_dtype(t.dtype) else 0.0)
    if thunder.dtypes.is_complex_dtype(t.dtype):
        zero = 0j
    return prims.pad(t, zero, config)


def _inverse(leaf: BoundSymbol, before: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``before`` (the view prim's input now) with the part ``leaf`` selects replaced by ``new``."""
    sid = leaf.sym.id
    a = leaf.args[0]
    if sid is PrimIDs.SLICE:
        return _inverse_slice(leaf, before, new)
    if sid is PrimIDs.TRANSPOSE:
        perm = leaf.args[1]
        inverse = [0] * len(perm)
        for k, d in enumerate(perm):
            inverse[d] = k
        return prims.transpose(new, tuple(inverse))
    if sid is PrimIDs.SHALLOW_COPY:
        return new
    if sid is PrimIDs.BROADCAST_IN_DIM and new.numel != a.numel:
        raise FunctionalizationError(
            f"{leaf.sym.name} expands {a.name} to shape {tuple(new.shape)}: several elements of the result are one "
            "memory location, so it cannot be written (eager refuses too). Clone it before writing."
        )
    return prims.reshape(new, tuple(a.shape))  # reshape, squeeze, non-expanding broadcast_in_dim


_INVERSES = frozenset({PrimIDs.SLICE, PrimIDs.TRANSPOSE, PrimIDs.SHALLOW_COPY, PrimIDs.BROADCAST_IN_DIM,
                       PrimIDs.RESHAPE, PrimIDs.SQUEEZE})


# --- rules --------------------------------------------------------------------------------------------------
class ThunderRules(Rules):
    """:class:`effects.functionalize.Rules` for an adapted Thunder trace (``adapted.bsyms[i]`` is instruction
    ``i``); ``grad_enabled[i]`` is the grad mode instruction ``i`` ran under."""

    def __init__(self, adapted: AdaptedTrace, grad_enabled: Sequence[bool], proxies: Mapping[Hashable, Proxy]) -> None:
        self.adapted = adapted
        self.grad_enabled = grad_enabled
        self.proxies = proxies
        self.arguments = frozenset(adapted.program.inputs)

    def functional(self, index: int, inst: Instruction, inputs: tuple[Any, ...],
                   new_values: Mapping[tuple[int, int], Hashable]) -> Sequence[Instruction] | None:
        bsym = self.adapted.bsyms[index]
        if bsym.sym.id is not PrimIDs.COPY_:
            return None
        (position, _), name = next(iter(new_values.items()))
        source = 1 - position  # copy_(copy_from, copy_to): operand 1 is written, operand 0 is its new value
        written, value = self.proxies.get(str(inputs[position])), self.proxies.get(str(inputs[source]))
        if isinstance(written, TensorProxy) and written.dtype in _LOW_PRECISION and isinstance(value, TensorProxy):
            value.tags.add(STORED)
        return [Instruction(SAME, (inputs[source],), (name,))]

    def scatter(self, index: int, inst: Instruction, output: int, base: Hashable, view: Hashable,
                name: Hashable) -> Sequence[Instruction]:
        if index < 0:  # an argument as a view of its group's synthetic base: put it back at its positions
            return [Instruction(Call(_alias_scatter, "alias_scatter"), (base, inst.inputs[1], view), (name,))]
        bsym = self.adapted.bsyms[index]
        parent = next(v for op in inst.inputs for v in operand_values(op))
        chain = _view_chain(bsym, str(parent), inst.outputs[output])
        if chain is None:
            raise FunctionalizationError(
                f"cannot write through the result of {bsym.sym.name} ({inst}): its decomposition is not a chain of "
                "view prims this pass can invert (slice, transpose, reshape, squeeze, broadcast_in_dim, "
                "shallow_copy). Clone the view before writing it."
            )

        def scatter_chain(base_now: TensorProxy, new_view: TensorProxy) -> TensorProxy:
            values = [base_now]
            for leaf in chain[:-1]:  # the chain's intermediate views of the current base
                values.append(_replay_prim(leaf, values[-1]))
            new = new_view
            for leaf, before in zip(reversed(chain), reversed(values), strict=True):
                new = _inverse(leaf, before, new)
            return new

        return [Instruction(Call(scatter_chain, f"scatter<{bsym.sym.name}>"), (base, view), (name,))]

    def replay_copies(self, index: int, inst: Instruction) -> bool:
        return index < 0  # an argument gathered from its group's synthetic base

    def clone(self, value: Hashable, name: Hashable) -> Instruction:
        return Instruction(Call(ltorch.clone, "clone"), (value,), (name,))

    def commit(self, index: int, inst: Instruction, root: Hashable, before: Hashable, after: Hashable,
               name: Hashable) -> Sequence[Instruction] | None:
        if self.grad_enabled[index] or (root in self.arguments and not self.proxies[str(root)].requires_grad):
            return None  # autograd records it, or the argument has no autograd identity to keep
        return [Instruction(Call(NO_GRAD_UPDATE, "no_grad_update"), (before, after), (name,))]


def _alias_gather(base: TensorProxy, index: TensorProxy) -> TensorProxy:
    return ltorch.reshape(ltorch.index_select(base, 0, ltorch.reshape(index, (-1,))), tuple(index.shape))


def _alias_scatter(base: TensorProxy, index: TensorProxy, new: TensorProxy) -> TensorProxy:
    return ltorch.index_copy(base, 0, ltorch.reshape(index, (-1,)), ltorch.reshape(new, (-1,)))


def _alias_base(*members: TensorProxy) -> TensorProxy:
    return ltorch.cat([ltorch.reshape(m, (-1,)) for m in members])


def _synthetic_bases(groups: Sequence[frozenset[Hashable]],
                     inputs: Sequence[Hashable]) -> tuple[list[Instruction], dict]:
    """``input_views`` making every group of arguments that share storage views of one synthetic base (their
    elements concatenated; each argument gathers its elements at the positions of their memory locations' first
    occurrence, so a write through one is seen through the others), and per base name its members and index
    names."""
    views: list[Instruction] = []
    bases: dict[Hashable, list[tuple[Hashable, str]]] = {}
    for k, group in enumerate(groups):
        members = [v for v in inputs if v in group]
        base, indices = f"__alias_base{k}", [f"__alias_index{k}_{j}" for j in range(len(members))]
        views.append(Instruction(Call(ALIAS_INDEX, "alias_index", raw=True), tuple(members), tuple(indices)))
        views.append(Instruction(Call(_alias_base, "alias_base"), tuple(members), (base,)))
        views += [Instruction(Call(_alias_gather, "alias_gather"), (base, index), (m,))
                  for m, index in zip(members, indices, strict=True)]
        bases[base] = list(zip(members, indices, strict=True))
    return views, bases


def _replay_prim(leaf: BoundSymbol, source: TensorProxy) -> TensorProxy:
    return leaf.sym(source, *leaf.args[1:], **leaf.kwargs)


# --- materializing the functional program -------------------------------------------------------------------
def _swap_map(old: Iterable[Any], new: Iterable[Any], env: Mapping[Hashable, Any],
              proxies: Mapping[Hashable, Proxy]) -> dict[Any, Proxy]:
    swap = {}
    for a, b in zip(old, new, strict=False):
        for x, y in zip(operand_values(a), operand_values(b), strict=False):
            if env[y] is not proxies[x]:
                swap[variableify(proxies[x])] = env[y]
    return swap


def _resolve(operand: Any, env: Mapping[Hashable, Any]) -> Any:
    if isinstance(operand, Const):
        return operand.value
    if isinstance(operand, tuple):
        return tuple(_resolve(o, env) for o in operand)
    return env[operand]


@dataclass(frozen=True, slots=True)
class Writeback:
    """An input the functional computation no longer writes: ``position`` in the computation's arguments, its
    final value, and whether the write-back must move autograd history (:data:`WRITEBACK` in the epilogue) or only
    data (``prims.copy_`` in the computation)."""

    position: int
    input: TensorProxy
    final: TensorProxy
    autograd: bool


def _trace_proxies(trace: TraceCtx) -> dict[Hashable, Proxy]:
    found: dict[Hashable, Proxy] = {}

    def visit(bsyms: Iterable[BoundSymbol]) -> None:
        for bsym in bsyms:
            for p in (*bsym.flat_proxy_args, *bsym.flat_proxy_outs):
                found.setdefault(p.name, p)
            visit(bsym.subsymbols)

    flat, _ = tree_flatten((trace.args, trace.kwargs))
    for p in flat:
        if isinstance(p, Proxy):
            found.setdefault(p.name, p)
    visit(trace.bound_symbols)
    return found


def _grad_modes(adapted: AdaptedTrace, start: bool, side_effects: set[int]) -> list[bool]:
    """Whether autograd records each instruction's write: the grad mode it runs under (``set_grad_enabled``
    switches it; ``copy_`` records its own), and never for a write into a ``detach``-ed tensor or a view of one,
    nor for a kernel's side effect (``side_effects``, see :func:`_flatten_writers`)."""
    modes = []
    mode = start
    detached: set[Hashable] = set()
    for bsym, inst in zip(adapted.bsyms, adapted.program.instructions, strict=True):
        if bsym.sym.id == "set_grad_enabled":
            mode = bool(bsym.args[0])
        if bsym.sym.id is PrimIDs.COPY_ and "grad_enabled" in bsym.kwargs:
            written = set(operand_values(inst.inputs[1]))
            modes.append(bool(bsym.kwargs["grad_enabled"]) and not written & detached and id(bsym) not in side_effects)
        else:
            modes.append(mode)
        if bsym.sym.id == DETACH:
            detached.update(inst.outputs)
        eff = inst.effects
        if eff is not None and not eff.opaque:
            for alias in eff.aliases:
                if not alias.of_output and set(operand_values(inst.inputs[alias.operand])) & detached:
                    detached.add(inst.outputs[alias.output])
    return modes


def functionalize_for_grad(trace: TraceCtx, *, grad_enabled: bool,
                           input_aliases: Iterable[Iterable[str]] = ()) -> tuple[TraceCtx, tuple[Writeback, ...]]:
    """The computation ``trace`` without writes (see the module docstring) and the write-backs of its inputs.

    Data write-backs are already in the returned trace (``prims.copy_`` before the return); autograd write-backs
    are listed for the caller, whose epilogue must perform them (:func:`after_acquire` threads them). A written-back
    argument the backward may save is read through a clone (:func:`_read_through_clones`): the write-back changes
    the argument in place before the backward runs. The trace is returned unchanged (and no write-backs) when it
    writes nothing.

    Raises:
        FunctionalizationError: a write with no value semantics (see :func:`effects.functionalize`).
    """
    if not any(_writes(b) for b in trace.bound_symbols):
        return trace, ()
    with gc_paused():  # many small acyclic objects: full collections over Thunder's heap would dominate
        return _functionalize_for_grad(trace, grad_enabled, input_aliases)


def _fresh_outputs(adapted: AdaptedTrace) -> set[tuple[int, int]]:
    """``(instruction, output)`` may-views that are fresh tensors in this trace: a conversion to another dtype or
    device (``x.to(torch.bfloat16)``, ``x.bfloat16()`` of a float32 ``x``) is never its operand."""
    fresh: set[tuple[int, int]] = set()
    for i, (inst, bsym) in enumerate(zip(adapted.program.instructions, adapted.bsyms, strict=True)):
        eff = inst.effects
        if eff is None or eff.opaque or not any(a.may for a in eff.aliases):
            continue
        outs = [o for o in bsym.flat_proxy_outs]
        by_name = {p.name: p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)}
        for alias in eff.aliases:
            if not alias.may or alias.of_output or alias.output >= len(outs):
                continue
            out, values = outs[alias.output], operand_values(inst.inputs[alias.operand])
            src = by_name.get(values[0]) if len(values) == 1 else None
            if isinstance(out, TensorProxy) and src is not None and (out.dtype, out.device) != (src.dtype, src.device):
                fresh.add((i, alias.output))
    return fresh


def _functionalize_for_grad(trace: TraceCtx, grad_enabled: bool,
                            input_aliases: Iterable[Iterable[str]]) -> tuple[TraceCtx, tuple[Writeback, ...]]:
    side_effects: set[int] = set()
    bsyms = _flatten_writers(trace.bound_symbols, side_effects)
    flat_args, _ = tree_flatten((trace.args, trace.kwargs))
    adapted = adapt_bsyms(bsyms, args=flat_args, input_aliases=input_aliases)
    proxies = _trace_proxies(trace)
    modes = _grad_modes(adapted, grad_enabled, side_effects)
    views, bases = _synthetic_bases(adapted.program.input_aliases, adapted.program.inputs)
    result = functionalize(adapted.program, ThunderRules(adapted, modes, proxies), input_views=views,
                           fresh_outputs=_fresh_outputs(adapted))
    build = _Build(trace, adapted, result, proxies, bases, written_arguments(adapted, modes), flat_args)
    new, writebacks = build(frozenset())
    cloned = _read_through_clones(new, writebacks, flat_args)
    if cloned:
        new, writebacks = build(cloned)
    return new, writebacks


def _read_through_clones(trace: TraceCtx, writebacks: Sequence[Writeback], args: Sequence[Any]) -> frozenset[str]:
    """Written-back arguments the backward may save before the write-back changes them in place: every argument
    with an autograd write-back, and every argument with a data write-back whose value as passed is read by an
    instruction whose result requires grad (``y = x * w`` saves ``x`` for ``w``'s gradient, and the write-back
    would then change it before the backward runs)."""
    grad = _requiring_grad(trace.bound_symbols, args)
    written = {w.input.name for w in writebacks}
    risky = {w.input.name for w in writebacks if w.autograd}
    for bsym in trace.bound_symbols:
        if bsym.sym.id is PrimIDs.COPY_ or bsym.sym is NO_GRAD_UPDATE:  # their backward saves nothing
            continue
        reads = {p.name for p in bsym.flat_proxy_args} & written
        if reads and any(o.name in grad for o in bsym.flat_proxy_outs):
            risky |= reads
    return frozenset(risky)


@dataclass(frozen=True, slots=True)
class _Build:
    """Materializes a functional program as a Thunder trace, with its input write-backs."""

    trace: TraceCtx
    adapted: AdaptedTrace
    result: effects.Functionalized
    proxies: Mapping[Hashable, Proxy]
    bases: Mapping[Hashable, list[tuple[Hashable, str]]]
    written_under_grad: set[Hashable]
    flat_args: Sequence[Any]

    def __call__(self, cloned: frozenset[str]) -> tuple[TraceCtx, tuple[Writeback, ...]]:
        """The trace, reading the arguments in ``cloned`` through clones, and its write-backs."""
        adapted, proxies = self.adapted, self.proxies
        new = from_trace(self.trace)
        new.bound_symbols = list(adapted.prefix)
        env: dict[Hashable, Any] = {name: p for name, p in proxies.items() if name in adapted.program.inputs}
        for name in sorted(cloned):
            env[name] = self.call(new, ltorch.clone, proxies[name])
        insts = adapted.program.instructions
        for inst, (kind, index) in zip(self.result.program.instructions, self.result.origin, strict=True):
            if isinstance(inst.op, Call):
                out = self.call(new, inst.op.fn, *(_resolve(o, proxies if inst.op.raw else env) for o in inst.inputs))
                env.update(zip(inst.outputs, [out] if isinstance(out, Proxy) else list(out), strict=False))
                continue
            bsym = adapted.bsyms[index]
            swap = _swap_map(insts[index].inputs, inst.inputs, env, proxies)
            if kind in ("keep", "run"):
                new.bound_symbols.append(bsym.from_bsym_swap_proxies(swap, skip_output=True))
                env.update((name, proxies[name]) for name in inst.outputs if name in proxies)
                continue
            assert kind == "replay", kind
            args, kwargs = tree_map(lambda x, swap=swap: swap.get(variableify(x), x) if isinstance(x, Proxy) else x,
                                    (bsym.args, bsym.kwargs))
            outs, _ = tree_flatten(self.call(new, bsym.sym, *args, **kwargs))
            env.update(zip(inst.outputs, [o for o in outs if isinstance(o, Proxy)], strict=False))
        writebacks = self.write_back(new, env, _requiring_grad(new.bound_symbols, self.flat_args))
        returns = {variableify(proxies[old]): env[name]
                   for old, name in zip(adapted.program.returns, self.result.program.returns, strict=False)}
        assert adapted.return_bsym is not None
        new.bound_symbols.append(adapted.return_bsym.from_bsym_swap_proxies(returns))
        new.set_provenance(TraceProvenance("Effect functionalization for autograd (thunder-effects)"))
        return new, writebacks

    @staticmethod
    def call(trace: TraceCtx, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` recorded at the end of ``trace``."""
        trace.push_scope([])
        with tracectx(trace):
            out = fn(*args, **kwargs)
        trace.bound_symbols += trace.pop_scope()
        return out

    def write_back(self, new: TraceCtx, env: Mapping[Hashable, Any], grad: set[str]) -> tuple[Writeback, ...]:
        """Every written argument's final value (a synthetic base's, per member); data write-backs as
        ``prims.copy_`` at the end of ``new``. ``grad``: the names of the values that require grad."""
        finals = []
        for name, final in self.result.epilogue:
            if name not in self.bases:
                finals.append((name, env[final]))
                continue
            for member, index in self.bases[name]:  # each argument of the group takes its elements
                finals.append((member, self.call(new, _alias_gather, env[final], env[index])))
        position = {p.name: k for k, p in enumerate(self.flat_args) if isinstance(p, Proxy)}
        writebacks = []
        for name, value in finals:
            inp = self.proxies[name]
            autograd = name in self.written_under_grad and (inp.requires_grad or value.name in grad)
            writebacks.append(Writeback(position[name], inp, value, autograd))
            if not autograd:
                self.call(new, prims.copy_, value, inp, grad_enabled=False)
        return tuple(writebacks)


def _requiring_grad(bsyms: Sequence[BoundSymbol], args: Sequence[Any]) -> set[str]:
    """Names of the values that require grad: floating results of anything reading one, from the arguments that
    require grad on — except what autograd does not record (anything inside a ``set_grad_enabled(False)`` block,
    ``detach``) and
    :data:`NO_GRAD_UPDATE`, which requires grad exactly when the value it updates does. (Thunder's proxies do not
    carry this for intermediates.)"""
    grad = {a.name for a in args if isinstance(a, TensorProxy) and a.requires_grad}
    recording = True  # functionalization runs only where a backward is built
    for bsym in bsyms:
        if bsym.sym.id == "set_grad_enabled":
            recording = bool(bsym.args[0])
        if bsym.sym is NO_GRAD_UPDATE:  # in any grad mode (it is made where the no-grad write happened)
            reads = {bsym.args[0].name} if isinstance(bsym.args[0], Proxy) else set()
        elif not recording or bsym.sym.id == DETACH:
            continue
        else:
            reads = {p.name for p in bsym.flat_proxy_args}
        if reads & grad:
            grad.update(o.name for o in bsym.flat_proxy_outs
                        if isinstance(o, TensorProxy) and thunder.dtypes.is_inexact_dtype(o.dtype)
                        and ProxyTag.DETACHED_AUTOGRAD_GRAPH not in o.tags)
    return grad


def written_arguments(adapted: AdaptedTrace, modes: Sequence[bool] | None = None) -> set[Hashable]:
    """Inputs whose storage some instruction writes (only instructions ``i`` with ``modes[i]``, when given: those
    under grad mode); an instruction with unknown writes writes every input."""
    graph = effects.DependencyGraph.build(adapted.program)
    storage = graph.storage
    inputs = adapted.program.inputs
    found: set[Hashable] = set()
    for i in range(graph.n):
        if modes is None or modes[i]:
            written = graph.written_storage(i)
            found.update(v for v in inputs if written is None or storage.storage(v) in written)
    return found


# --- wiring: right after Thunder acquired the traces ---------------------------------------------------------
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


def after_acquire(results: Any, input_aliases: Iterable[frozenset[str]]) -> Any:
    """Functionalize ``results.computation_trace`` (Thunder's ``TraceResults``) when the compilation will be
    differentiated, and thread its autograd write-backs through the prologue and the epilogue (see the module
    docstring). ``input_aliases`` are the computation's arguments that share storage in the call being compiled
    (:func:`thunder_ext.python_state.arguments.alias_groups_of`). Returns ``results`` (modified in place)."""
    from thunder.core.compile_data import get_compile_data

    cd = get_compile_data()
    computation = results.computation_trace
    if not differentiated(computation):
        if any(isinstance(a, TensorProxy) and a.requires_grad for a in computation.args):
            _arguments_without_grad(computation)  # constant for autograd: no forward/backward split
        return results
    new, writebacks = functionalize_for_grad(computation, grad_enabled=bool(cd.is_grad_enabled),
                                             input_aliases=input_aliases)
    results.computation_trace = new
    _dedupe_outputs(results)
    _detach_outputs_without_grad(results)
    autograd = [w for w in writebacks if w.autograd]
    if autograd:
        _thread_writebacks(results, autograd)
        record_epilogue_writes(frozenset(w.input.name for w in autograd))
    return results


def _detach_outputs_without_grad(results: Any) -> None:
    """Thunder connects every output of a differentiated computation to autograd (one ``autograd.Function``), so a
    floating tensor it computed that eager would hold without history — optimizer state created under ``no_grad``
    inside a training step, a value computed under ``no_grad`` or from arguments that do not require grad — came
    back requiring grad, with a ``grad_fn`` into this call's graph (a later loss reaching it backpropagated into a
    freed graph). The epilogue detaches each such output (:data:`DETACH_OUTPUT`, once per value, before any use:
    returned and stored values stay one tensor); arguments returned as they are keep their identity."""
    computation, epilogue = results.computation_trace, results.epilogue_trace
    flat_args, _ = tree_flatten((computation.args, computation.kwargs))
    grad = _requiring_grad(computation.bound_symbols, flat_args)
    arguments = {a.name for a in flat_args if isinstance(a, Proxy)}
    n_pro = len(results.prologue_trace.bound_symbols[-1].args[0][1])
    params = list(epilogue.args)
    body = list(epilogue.bound_symbols)
    swap: dict[Any, Proxy] = {}
    detaches = []
    for k, out in enumerate(computation.bound_symbols[-1].args[0]):
        if (isinstance(out, TensorProxy) and thunder.dtypes.is_inexact_dtype(out.dtype) and out.name not in grad
                and out.name not in arguments):
            param = params[n_pro + k]
            with tracectx(epilogue):
                detached = TensorProxy(like=param, requires_grad=False)
            detaches.append(DETACH_OUTPUT.bind(param, output=detached))
            swap[variableify(param)] = detached
    if not swap:
        return
    unpacked = next((k for k, b in enumerate(body) if b.sym.id is not PrimIDs.UNPACK_TRIVIAL), len(body))
    epilogue.bound_symbols = (body[:unpacked] + detaches
                              + [b.from_bsym_swap_proxies(swap) for b in body[unpacked:]])


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


def _arguments_without_grad(computation: TraceCtx) -> None:
    """The computation's tensor arguments, as Thunder's autograd decision sees them, require no grad: no
    forward/backward split (the program runs as traced, in place, as eager runs it under ``no_grad``)."""
    from thunder.core.trace import detached_trace

    with detached_trace():  # the same names, in a scratch trace
        computation.args = [a.replace(requires_grad=False) if isinstance(a, TensorProxy) and a.requires_grad else a
                            for a in computation.args]


def _dedupe_outputs(results: Any) -> None:
    """Return each value once from the computation: functionalization gives values that were different tensors
    one value (``t = a.mul_(b); return t, a``), and the backward takes one cotangent per value. Repeated outputs
    become repeated uses of one epilogue parameter."""
    computation, epilogue = results.computation_trace, results.epilogue_trace
    outputs = tuple(computation.bound_symbols[-1].args[0])
    n_pro = len(results.prologue_trace.bound_symbols[-1].args[0][1])
    params = list(epilogue.args)
    first: dict[int, int] = {}
    swap: dict[Any, Proxy] = {}
    for k, out in enumerate(outputs):
        j = first.setdefault(id(out), k)
        if j != k:
            swap[variableify(params[n_pro + k])] = params[n_pro + j]
    if not swap:
        return
    kept = sorted(first.values())
    computation.bound_symbols[-1] = prims.python_return.bind(tuple(outputs[k] for k in kept), output=None)
    dropped = {params[n_pro + k].name for k in range(len(outputs)) if k not in kept}
    epilogue.bound_symbols = [b.from_bsym_swap_proxies(swap) for b in epilogue.bound_symbols
                              if not (b.sym.id is PrimIDs.UNPACK_TRIVIAL and b.output.name in dropped)]
    epilogue.args = params[:n_pro] + [params[n_pro + k] for k in kept]
    SIGINFO.get(epilogue).args = [(p.name, None) for p in epilogue.args]


def _thread_writebacks(results: Any, writebacks: Sequence[Writeback]) -> None:
    """Pass each written input from the prologue to the epilogue and its final value from the computation to the
    epilogue (once: an output proxy appears once among the outputs, or the backward would see only one of its
    cotangents), and write it there with :data:`WRITEBACK`; a returned final value becomes the input itself."""
    computation, prologue, epilogue = results.computation_trace, results.prologue_trace, results.epilogue_trace
    outputs = tuple(computation.bound_symbols[-1].args[0])
    position = {id(out): k for k, out in reversed(list(enumerate(outputs)))}
    extra: list[Any] = []
    for w in writebacks:
        if id(w.final) not in position:
            position[id(w.final)] = len(outputs) + len(extra)
            extra.append(w.final)
    computation.bound_symbols[-1] = prims.python_return.bind(outputs + tuple(extra), output=None)

    pro_to_comp, pro_to_epi = prologue.bound_symbols[-1].args[0]
    inputs = tuple(pro_to_comp[w.position] for w in writebacks)
    prologue.bound_symbols[-1] = prims.python_return.bind((pro_to_comp, tuple(pro_to_epi) + inputs), output=None)

    n_pro = len(pro_to_epi)
    old_args = list(epilogue.args)
    with tracectx(epilogue):
        ep_inputs = [TensorProxy(like=w.input, requires_grad=w.input.requires_grad) for w in writebacks]
        ep_extra = [TensorProxy(like=f, requires_grad=f.requires_grad) for f in extra]
    comp_params = old_args[n_pro:] + ep_extra  # the epilogue's parameters for the computation's outputs
    new_args = old_args[:n_pro] + ep_inputs + comp_params
    unpacks = [prims.unpack_trivial.bind(p, name=p.name, output=p) for p in (*ep_inputs, *ep_extra)]
    body = list(epilogue.bound_symbols)
    ep_return = body.pop()
    writes = [WRITEBACK.bind(ep_input, comp_params[position[id(w.final)]], output=None)
              for w, ep_input in zip(writebacks, ep_inputs, strict=True)]
    # a returned final value is the input itself after the write-back (eager returns the mutated tensor)
    same = {variableify(comp_params[position[id(w.final)]]): ep_input
            for w, ep_input in zip(writebacks, ep_inputs, strict=True)}
    epilogue.bound_symbols = unpacks + body + writes + [ep_return.from_bsym_swap_proxies(same)]
    epilogue.args = new_args
    SIGINFO.get(epilogue).args = [(p.name, None) for p in new_args]
