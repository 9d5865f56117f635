"""What the torch.compile hazard checks read about a program, shared by every check of
:mod:`thunder_ext.passes.inductor_guard` (and the stale-buffer interpretation of
:mod:`thunder_ext.passes.stale_buffers`).

A check looks at one region (instruction indices of an adapted trace, in order) and answers a :class:`Hazard`: where
to split it. What it needs beyond the effect graph is program-wide and computed once per trace in
:class:`ProgramFacts`: who defines and who uses each value, what the program returns, which values are *full*
(their own storage, or what an in-place op hands back for one: a write through them replaces the whole class, a
write through anything else is a scatter) and, on demand, element counts from Thunder's proxies. Operators are
matched by their bare name (:func:`op_name`), the way Inductor's patterns match ATen ops.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Set
from dataclasses import dataclass

from effects import DependencyGraph

from thunder.core.proxies import TensorProxy

from ..host.fast import proxy_outs
from ..declare.adapter import AdaptedTrace
from ..declare.keys import python_signature

__all__ = ["Hazard", "ProgramFacts", "add_alpha", "op_name", "written_classes"]

Value = Hashable


@dataclass(frozen=True, slots=True)
class Hazard:
    """A miscompilation pattern in one region: split the region before member ``split``."""

    split: int
    """Position in the region's member list; the prefix is ``members[:split]`` (``0 < split < len(members)``)."""
    reason: str


def op_name(op: Hashable) -> str:
    """The bare operator name of an instruction key: ``"torch.Tensor.index_put_"`` -> ``"index_put"``."""
    key = op[0] if isinstance(op, tuple) and op else op
    name = getattr(key, "name", None) if not isinstance(key, str) else key
    text = str(name if name is not None else key).lower().rsplit(".", 1)[-1]
    return text[:-1] if text.endswith("_") and not text.endswith("__") else text


class ProgramFacts:
    """Program-wide facts the per-region scan needs: definers, users, returned values and *full* values."""

    def __init__(self, adapted: AdaptedTrace, graph: DependencyGraph) -> None:
        program = adapted.program
        self.adapted = adapted
        self.graph = graph
        self.definer: dict[Value, int] = {}
        self.users: dict[Value, set[int]] = {}
        self.returned = frozenset(program.returns)
        self._numel: dict[Value, int | None] = {}
        aliased_inputs = {v for group in program.input_aliases for v in group}
        self.full: dict[Value, bool] = {v: v not in aliased_inputs for v in program.inputs}
        for i, inst in enumerate(program.instructions):
            for v in inst.input_values():
                self.users.setdefault(v, set()).add(i)
            eff = graph.effects(i)
            for j, out in enumerate(inst.outputs):
                self.definer[out] = i
                aliases = [a for a in eff.aliases if a.output == j]
                definite = [a for a in aliases if not a.may]  # a definite view decides; may-aliases add nothing
                # a full value: fresh storage, or what an in-place op hands back for the full value it wrote
                self.full[out] = not aliases or bool(definite) and all(
                    not a.of_output and a.operand in eff.written
                    and all(self.full.get(v, False) for v in inst.values_at(a.operand))
                    for a in definite
                )

    def storage(self, value: Value) -> int:
        return self.graph.storage.storage(value)

    def escapes(self, value: Value, members: Set[int]) -> bool:
        """Whether ``value`` leaves the region ``members``: the program returns it or an instruction outside uses it."""
        return value in self.returned or not self.users.get(value, set()) <= members

    def numel(self, value: Value) -> int | None:
        """How many elements ``value`` has, from its Thunder proxy (``None``: unknown). Looked up on demand."""
        if value not in self._numel:
            self._numel[value] = None
            for i in (self.definer.get(value), *sorted(self.users.get(value, ()))):
                bsym = self.adapted.bsyms[i] if i is not None and i < len(self.adapted.bsyms) else None
                proxies = () if bsym is None else (*proxy_outs(bsym), *bsym.flat_args)
                proxy = next((p for p in proxies if isinstance(p, TensorProxy) and p.name == value), None)
                if proxy is not None:
                    shape = tuple(proxy.shape)
                    self._numel[value] = math.prod(shape) if all(type(d) is int for d in shape) else None
                    break
        return self._numel[value]


def written_classes(facts: ProgramFacts, i: int) -> frozenset[int]:
    """The storage classes instruction ``i`` writes: :meth:`effects.DependencyGraph.written_storage`, except for an
    opaque instruction. There the core answers ``None`` (it may write *any* class, also through state the program
    does not show), but the checks need the concrete classes a member writes, to re-time their buffers and order
    write-backs; they count an opaque member as writing its operands' classes: the buffers ``torch.compile``
    hands that member in the one graph the checks model.
    """
    written = facts.graph.written_storage(i)
    if written is None:
        return frozenset(facts.storage(v) for v in facts.adapted.program.instructions[i].input_values())
    return written


def add_alpha(adapted: AdaptedTrace, i: int) -> object:
    """The ``alpha`` argument of the call at instruction ``i`` (``None``: not given, or the call does not bind)."""
    bsym = adapted.bsyms[i]
    sig = python_signature(bsym.sym)
    if sig is None:
        return None
    try:
        return sig.bind(*bsym.args, **bsym.kwargs).arguments.get("alpha")
    except TypeError:
        return None
