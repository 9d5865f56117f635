"""Thunder traces ⇄ neutral :class:`effects.Program`: one bound symbol becomes one :class:`~effects.Instruction`.

* **values** are proxy names; ``unpack_trivial`` outputs (the trace's arguments) and any value used but never
  defined become program inputs; the ``python_return`` bound symbol becomes the program's returns;
* **operands** follow the symbol's Python signature (:mod:`thunder_ext.declare.binding`);
* **effects** are resolved per bound symbol and stored on the instruction (:mod:`thunder_ext.declare.resolve`), so the
  graph never asks the registry again;
* a symbol that hands back a value it received (or the same value twice) defines a fresh, renamed value
  (``name@instruction.output``) declared a definite view of that operand;
* **runtime input aliasing** is passed in as groups of input names (``input_aliases``), never rewritten.

The adapter never changes a trace: :class:`AdaptedTrace` keeps the bound symbols aligned with the instructions so
a pass can map its decisions back (:mod:`thunder_ext.passes.partition`). Cost: O(bound symbols + operand uses), the
effects of each bound symbol resolved once per registry generation; its instruction (operand values, output names)
is kept with that resolution and reused by every later adaptation where none of its outputs is defined yet (the
one case that depends on the rest of the trace: the renaming above).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import effects
from effects import Alias, Effects, Instruction, Program, gc_paused, operand_values

from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol

from ..host.fast import proxy_out_names
from .keys import op_key
from .resolve import resolver_for

if TYPE_CHECKING:
    from .resolve import _Resolved

__all__ = ["AdaptedTrace", "adapt", "adapt_bsyms"]


@dataclass(frozen=True, slots=True)
class AdaptedTrace:
    """A neutral program and the bound symbols it came from (``bsyms[i]`` is instruction ``i``)."""

    program: Program
    bsyms: tuple[BoundSymbol, ...]
    prefix: tuple[BoundSymbol, ...]
    """Bound symbols that define the program inputs (``unpack_trivial``), in trace order."""
    return_bsym: BoundSymbol | None


def adapt_bsyms(
    bsyms: Iterable[BoundSymbol],
    *,
    args: Iterable[object] = (),
    registry: effects.Registry | None = None,
    input_aliases: Iterable[Iterable[str]] = (),
) -> AdaptedTrace:
    """Adapt a list of bound symbols (a trace body); ``args`` are extra argument proxies (the trace's args)."""
    with gc_paused():  # many small acyclic objects: full collections over Thunder's heap would dominate
        return _adapt_bsyms(bsyms, args, registry, input_aliases)


def _adapt_bsyms(bsyms: Iterable[BoundSymbol], args: Iterable[object], registry: effects.Registry | None,
                 input_aliases: Iterable[Iterable[str]]) -> AdaptedTrace:
    resolver = resolver_for(registry)
    adaptation = _Adaptation()
    for arg in args:
        if isinstance(arg, Proxy):
            adaptation.define_input(arg.name)
    for bsym in bsyms:
        sid = bsym.sym.id
        if sid is PrimIDs.UNPACK_TRIVIAL:
            adaptation.unpack(bsym)
        elif sid is PrimIDs.RETURN:
            adaptation.return_(bsym)
        else:
            adaptation.instruction(bsym, resolver.record(bsym))
    return adaptation.result(input_aliases)


class _Adaptation:
    """One adaptation in progress: the program inputs in order (the values used before being defined), every value
    defined so far, and the instructions with the bound symbols they came from."""

    __slots__ = ("inputs", "defined", "prefix", "aligned", "instructions", "returns", "return_bsym")

    def __init__(self) -> None:
        self.inputs: list[Hashable] = []
        self.defined: set[Hashable] = set()
        self.prefix: list[BoundSymbol] = []
        self.aligned: list[BoundSymbol] = []
        self.instructions: list[Instruction] = []
        self.returns: tuple[str, ...] = ()
        self.return_bsym: BoundSymbol | None = None

    def define_input(self, name: Hashable) -> None:
        if name not in self.defined:
            self.defined.add(name)
            self.inputs.append(name)

    def unpack(self, bsym: BoundSymbol) -> None:
        """An ``unpack_trivial``: its outputs are program inputs."""
        self.prefix.append(bsym)
        for name in proxy_out_names(bsym):
            self.define_input(name)

    def return_(self, bsym: BoundSymbol) -> None:
        """The ``python_return``: the program's returns (a value never defined is an input)."""
        self.return_bsym = bsym
        self.returns = tuple(p.name for p in bsym.flat_args if isinstance(p, Proxy))
        for name in self.returns:
            self.define_input(name)

    def instruction(self, bsym: BoundSymbol, resolved: _Resolved) -> None:
        """The instruction of any other bound symbol (``resolved``: its resolution), its operands' undefined values
        made inputs; the instruction kept with the resolution where none of its outputs is defined yet."""
        adapted = resolved.adapted
        if adapted is None:
            adapted = resolved.adapted = _adapted(bsym, resolved.operands, resolved.effects)
        values, names, inst = adapted
        for v in values:
            self.define_input(v)
        if inst is None or not self.defined.isdisjoint(names):
            inst = _renamed(bsym, resolved.operands, resolved.effects, names, self.defined, len(self.instructions))
        self.defined.update(inst.outputs)
        self.instructions.append(inst)
        self.aligned.append(bsym)

    def result(self, input_aliases: Iterable[Iterable[str]]) -> AdaptedTrace:
        """The adapted trace, with the groups of ``input_aliases`` restricted to the program's inputs."""
        known = set(self.inputs)
        groups = tuple(frozenset(n for n in g if n in known) for g in input_aliases)
        program = Program(tuple(self.instructions), tuple(self.inputs), self.returns,
                          tuple(g for g in groups if len(g) > 1))
        return AdaptedTrace(program, tuple(self.aligned), tuple(self.prefix), self.return_bsym)


def _renamed(bsym: BoundSymbol, operands: tuple[Any, ...], eff: Effects, names: tuple[str, ...],
             defined: set[Hashable], index: int) -> Instruction:
    """The instruction ``index`` of a symbol that hands back a value it received (or one value twice): each such
    output a fresh value (``name@index.j``) that is the same tensor, declared a definite view of the operands that
    use it."""
    outputs: list[str] = []
    extra_aliases = []
    for j, name in enumerate(names):
        if name in defined or name in outputs:
            outputs.append(f"{name}@{index}.{j}")
            extra_aliases += [Alias(j, k) for k, op in enumerate(operands) if name in operand_values(op)]
        else:
            outputs.append(name)
    if extra_aliases and not eff.opaque:
        eff = Effects(eff.operands, eff.aliases | frozenset(extra_aliases), eff.resources,
                      uncapturable=eff.uncapturable)
    return Instruction(op_key(bsym), operands, tuple(outputs), eff)


def _adapted(bsym: BoundSymbol, operands: tuple[Any, ...], eff: Effects
             ) -> tuple[tuple[Hashable, ...], tuple[str, ...], Instruction | None]:
    """What the adaptation of ``bsym`` takes from its resolution alone, kept on it (``_Resolved.adapted``, valid as
    long as the resolution): the values its operands use (in order, repeats kept), its output names, and its
    instruction where the outputs are distinct names (``None`` otherwise). An adaptation uses that instruction when
    none of the outputs is already defined (otherwise it renames them, see the module docstring): Instructions are
    immutable, so the many adaptations of one compilation share it."""
    values = tuple(v for operand in operands for v in operand_values(operand))
    names = tuple(proxy_out_names(bsym))
    inst = Instruction(op_key(bsym), operands, names, eff) if len(set(names)) == len(names) else None
    return values, names, inst


def adapt(trace: Any, *, registry: effects.Registry | None = None,
          input_aliases: Iterable[Iterable[str]] = ()) -> AdaptedTrace:
    """Adapt a Thunder ``TraceCtx``."""
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    return adapt_bsyms(trace.bound_symbols, args=flat, registry=registry, input_aliases=input_aliases)
