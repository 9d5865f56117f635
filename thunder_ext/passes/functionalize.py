"""Thunder's rules for :func:`effects.functionalize`, and the operators a functionalized trace uses.

:func:`effects.functionalize` removes writes from a program given the rules of its language; this module gives
them for Thunder traces (:class:`ThunderRules`), used by :mod:`thunder_ext.passes.grad_functionalization` (the pass)
and :mod:`thunder_ext.passes.autograd_boundary` (the write-backs in the epilogue):

* ``copy_(new, dst)`` means "``dst``'s new value is ``new``" (:data:`SAME`); a value an in-place write stores in
  low-precision storage is tagged :data:`STORED` (eager reads it back rounded).
* A write through a view is scattered into its base by inverting the view's prims one by one
  (:mod:`thunder_ext.passes.view_inverses`); stale views are replayed by calling their symbol again on the new
  base; writers without subsymbols (opaque torch ops) run on clones.
* **No-grad writes keep autograd identity.** In eager, ``with torch.no_grad(): w.mul_(2)`` changes ``w``'s data
  but not its place in the autograd graph: later uses of ``w`` still differentiate to ``w``. So a root written
  under no-grad gets its new value through :data:`NO_GRAD_UPDATE` (forward: the new value; backward: the
  gradient passes straight to the old value) — what the effect of "a write autograd does not see" means for
  values.
* **Arguments that share storage** at run time are views of one *synthetic base* (:func:`synthetic_bases`): their
  elements concatenated, each argument gathering its elements at the positions of their memory locations' first
  occurrence (:data:`ALIAS_INDEX`), so a write through one is seen through the others.

The operators registered here print in traces under their names (``thunder_effects_no_grad_update``,
``thunder_effects_writeback``, ``thunder_effects_alias_index``, ``thunder_effects_detach``);
``thunder_ext/__init__.py`` imports this module to declare them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import effects
from effects import Effects, FunctionalizationError, Instruction, Rules, operand_values

import thunder
from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, ProxyTag, TensorProxy
from thunder.core.symbol import Symbol

import thunder.torch as ltorch

from ..declare.adapter import AdaptedTrace
from .view_inverses import scatter_into, view_chain

__all__ = ["ThunderRules", "Call", "SAME", "STORED", "NO_GRAD_UPDATE", "WRITEBACK", "ALIAS_INDEX", "DETACH_OUTPUT",
           "synthetic_bases", "alias_gather"]


# --- the symbols functionalization adds ----------------------------------------------------------------------
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
``detach`` of a computed output eager would hold without autograd history
(:mod:`thunder_ext.passes.autograd_boundary`)."""


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
        chain = view_chain(bsym, str(parent), inst.outputs[output])
        if chain is None:
            raise FunctionalizationError(
                f"cannot write through the result of {bsym.sym.name} ({inst}): its decomposition is not a chain of "
                "view prims this pass can invert (slice, transpose, reshape, squeeze, broadcast_in_dim, "
                "shallow_copy). Clone the view before writing it."
            )
        scatter = functools.partial(scatter_into, chain)
        return [Instruction(Call(scatter, f"scatter<{bsym.sym.name}>"), (base, view), (name,))]

    def replay_copies(self, index: int, inst: Instruction) -> bool:
        return index < 0  # an argument gathered from its group's synthetic base

    def clone(self, value: Hashable, name: Hashable) -> Instruction:
        return Instruction(Call(ltorch.clone, "clone"), (value,), (name,))

    def commit(self, index: int, inst: Instruction, root: Hashable, before: Hashable, after: Hashable,
               name: Hashable) -> Sequence[Instruction] | None:
        if self.grad_enabled[index] or (root in self.arguments and not self.proxies[str(root)].requires_grad):
            return None  # autograd records it, or the argument has no autograd identity to keep
        return [Instruction(Call(NO_GRAD_UPDATE, "no_grad_update"), (before, after), (name,))]


def alias_gather(base: TensorProxy, index: TensorProxy) -> TensorProxy:
    """A member of an alias group read from its synthetic ``base``: the elements at the positions ``index``."""
    return ltorch.reshape(ltorch.index_select(base, 0, ltorch.reshape(index, (-1,))), tuple(index.shape))


def _alias_scatter(base: TensorProxy, index: TensorProxy, new: TensorProxy) -> TensorProxy:
    return ltorch.index_copy(base, 0, ltorch.reshape(index, (-1,)), ltorch.reshape(new, (-1,)))


def _alias_base(*members: TensorProxy) -> TensorProxy:
    return ltorch.cat([ltorch.reshape(m, (-1,)) for m in members])


def synthetic_bases(groups: Sequence[frozenset[Hashable]],
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
        views += [Instruction(Call(alias_gather, "alias_gather"), (base, index), (m,))
                  for m, index in zip(members, indices, strict=True)]
        bases[base] = list(zip(members, indices, strict=True))
    return views, bases

