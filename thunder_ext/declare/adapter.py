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
from typing import Any

import effects
from effects import Alias, Effects, Instruction, Program, gc_paused, operand_values

from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol

from ..host.fast import proxy_out_names
from .keys import op_key
from .resolve import resolver_for

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
    inputs: list[Hashable] = []
    defined: set[Hashable] = set()

    def define_input(name: Hashable) -> None:
        if name not in defined:
            defined.add(name)
            inputs.append(name)

    for arg in args:
        if isinstance(arg, Proxy):
            define_input(arg.name)
    prefix: list[BoundSymbol] = []
    aligned: list[BoundSymbol] = []
    instructions: list[Instruction] = []
    returns: tuple[str, ...] = ()
    return_bsym = None
    for bsym in bsyms:
        sid = bsym.sym.id
        if sid is PrimIDs.UNPACK_TRIVIAL:
            prefix.append(bsym)
            for name in proxy_out_names(bsym):
                define_input(name)
            continue
        if sid is PrimIDs.RETURN:
            return_bsym = bsym
            returns = tuple(p.name for p in bsym.flat_args if isinstance(p, Proxy))
            for name in returns:
                if name not in defined:
                    define_input(name)
            continue
        resolved = resolver.record(bsym)
        adapted = resolved.adapted
        if adapted is None:
            adapted = resolved.adapted = _adapted(bsym, resolved.operands, resolved.effects)
        values, names, inst = adapted
        for v in values:
            if v not in defined:
                defined.add(v)
                inputs.append(v)
        if inst is not None and defined.isdisjoint(names):  # the common case: the instruction made before
            defined.update(names)
            instructions.append(inst)
            aligned.append(bsym)
            continue
        operands, eff = resolved.operands, resolved.effects
        outputs = []
        extra_aliases = []
        for j, name in enumerate(names):
            if name in defined or name in outputs:
                # the symbol hands back a value it received (or twice): a fresh value that is the same tensor
                outputs.append(f"{name}@{len(instructions)}.{j}")
                extra_aliases += [Alias(j, k) for k, op in enumerate(operands) if name in operand_values(op)]
            else:
                outputs.append(name)
        if extra_aliases and not eff.opaque:
            eff = Effects(eff.operands, eff.aliases | frozenset(extra_aliases), eff.resources,
                          uncapturable=eff.uncapturable)
        defined.update(outputs)
        instructions.append(Instruction(op_key(bsym), operands, tuple(outputs), eff))
        aligned.append(bsym)
    known = set(inputs)
    groups = tuple(frozenset(n for n in g if n in known) for g in input_aliases)
    program = Program(tuple(instructions), tuple(inputs), returns, tuple(g for g in groups if len(g) > 1))
    return AdaptedTrace(program, tuple(aligned), tuple(prefix), return_bsym)


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
