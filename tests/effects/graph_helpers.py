"""Fake ops with declared effects and a compact program builder, shared by the graph-layer tests."""

from __future__ import annotations

from collections.abc import Hashable

from hypothesis import strategies as st

from effects import GLOBAL, IO, PURE, Const, Instruction, Program, Registry, Resource, ResourceEffect, make_effects

LOG = Resource("log")

OPS = {
    "add": PURE,  # out = a + b
    "add_": make_effects(read_writes=[0], aliases=[(0, 0)]),  # a += b, returns a
    "view": make_effects(aliases=[(0, 0)]),
    "copy_": make_effects(writes=[0]),  # blind write of operand 0
    "rand": make_effects(resources=[Resource("rng", "cpu")]),
    "print": make_effects(resources=[IO]),
    "log": make_effects(resources=[ResourceEffect(LOG, ordered=False)]),
    "fence": make_effects(resources=[GLOBAL]),
}
FUSIBLE = frozenset({"add", "add_", "view", "copy_"})


def declare_ops(registry: Registry) -> Registry:
    """Declare :data:`OPS` in ``registry`` (an isolated one); ``"mystery"`` stays undeclared, hence opaque."""
    for op, eff in OPS.items():
        registry.declare(op, eff, source="tests")
    return registry


def I(op: Hashable, *args: object, out: str | tuple[str, ...] = ()) -> Instruction:  # noqa: E743 - terse builder
    """``I("add", "x", 1, out="y")``: plain ints become Consts."""
    operands = tuple(Const(a) if isinstance(a, int) else a for a in args)
    return Instruction(op, operands, (out,) if isinstance(out, str) else out)


def fusible(inst: Instruction) -> bool:
    return inst.op in FUSIBLE


@st.composite
def programs(draw: st.DrawFn, max_size: int = 12) -> Program:
    """Random well-formed programs over :data:`OPS` and the opaque ``"mystery"`` op, with possibly aliased
    inputs."""
    inputs = ["x0", "x1", "x2"]
    values = list(inputs)
    insts = []
    for k in range(draw(st.integers(0, max_size))):
        op = draw(st.sampled_from([*OPS, "mystery"]))
        a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        out = f"t{k}"
        if op in ("print", "log"):
            insts.append(I(op, a))
            continue
        args = {"add": (a, b), "add_": (a, b), "copy_": (a, b), "view": (a,), "rand": (), "fence": (),
                "mystery": (a,)}[op]
        insts.append(I(op, *args, out=out))
        values.append(out)
    aliases = (frozenset({"x0", "x1"}),) if draw(st.booleans()) else ()
    returns = tuple(draw(st.lists(st.sampled_from(values), max_size=2, unique=True)))
    return Program(tuple(insts), tuple(inputs), returns, aliases)
