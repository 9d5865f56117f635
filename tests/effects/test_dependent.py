"""Effects that depend on constant arguments (:mod:`effects.dependent`): resolved per instruction from its
constants, cached on their values, validated, and seen by the registry, the graph and the passes."""

from __future__ import annotations

import pytest

import effects
from effects import (
    OPAQUE,
    ConflictingDeclarationError,
    Const,
    DependencyGraph,
    DependentEffects,
    EdgeKind,
    Instruction,
    InvalidDeclaration,
    NonTensorWriteError,
    Param,
    ParamKind,
    Program,
    Registry,
    Signature,
    comm,
    make_effects,
)

SIG = Signature((Param("a"), Param("group", ParamKind.OTHER), Param("skip_clone", ParamKind.OTHER)))
"""``all_reduce(a, group, skip_clone)``."""


def _all_reduce(group: str, skip_clone: bool) -> effects.Effects:
    written = make_effects(read_writes=[0], aliases=[(0, 0)]) if skip_clone else make_effects()
    return written | make_effects(resources=[comm(group)])


UNKNOWN = make_effects(read_writes=[0], aliases=[(0, 0, True)], resources=[effects.GLOBAL])
ALL_REDUCE = DependentEffects(on=("group", "skip_clone"), rule=_all_reduce, unknown=UNKNOWN)


def _call(a: str, group: str, skip_clone: bool, out: str) -> Instruction:
    return Instruction("all_reduce", (a, Const(group), Const(skip_clone)), (out,))


@pytest.fixture
def declared(registry: Registry) -> Registry:
    registry.declare("all_reduce", ALL_REDUCE, source="test", signature=SIG)
    return registry


def test_effects_follow_the_constants_of_each_instruction(declared: Registry) -> None:
    resolution = declared.resolve("all_reduce")
    assert resolution.origin == "declared" and resolution.effects == UNKNOWN
    assert resolution.dependent is not None and resolution.dependent.on == (1, 2)  # names bound to positions
    in_place = resolution.at(("x", Const("g0"), Const(True)))
    assert in_place.written == frozenset({0}) and {str(r) for r in in_place.resources} == {"comm[g0]"}
    cloned = resolution.at(("x", Const("g1"), Const(False)))
    assert cloned.written == frozenset() and {str(r) for r in cloned.resources} == {"comm[g1]"}


def test_a_constant_that_is_not_known_gives_the_declared_bound(declared: Registry) -> None:
    resolution = declared.resolve("all_reduce")
    assert resolution.at(("x", Const("g0"), "flag")) == UNKNOWN  # a value, not a constant
    assert resolution.at(("x",)) == UNKNOWN  # missing


def test_the_rule_runs_once_per_distinct_constants() -> None:
    calls: list[tuple[object, ...]] = []

    def rule(skip_clone: object) -> effects.Effects:
        calls.append((skip_clone,))
        return make_effects(read_writes=[0]) if skip_clone else make_effects()

    dependent = DependentEffects(on=(1,), rule=rule, unknown=make_effects(read_writes=[0]))
    for _ in range(3):
        assert dependent.at(("x", Const(True))).written == frozenset({0})
        assert dependent.at(("y", Const(False))).written == frozenset()
    assert calls == [(True,), (False,)]
    assert dependent.at(("x", Const([1, 2]))).written == frozenset({0})  # unhashable: answered, not cached
    assert calls[-1] == ([1, 2],)


def test_graph_edges_depend_on_the_constant(declared: Registry) -> None:
    def program(skip_clone: bool) -> Program:
        return Program((_call("x", "g0", skip_clone, "y"), Instruction("sin", ("x",), ("z",))), ("x",), ("y", "z"))

    declared.declare("sin", effects.PURE, source="test")
    writes = DependencyGraph.build(program(True), declared)
    assert [e.kind for e in writes.edges_between(0, 1)] == [EdgeKind.RAW]  # sin reads the reduced x
    reads = DependencyGraph.build(program(False), declared)
    assert reads.edges_between(0, 1) == ()  # two readers of x commute


def test_names_without_a_signature_are_refused(registry: Registry) -> None:
    with pytest.raises(InvalidDeclaration, match="no known signature"):
        registry.declare("my::op", DependentEffects(on=("flag",), rule=lambda flag: effects.PURE), source="test")


def test_a_rule_that_raises_or_answers_nonsense_is_named() -> None:
    def bad(flag: object) -> effects.Effects:
        raise KeyError(flag)

    registry = Registry()
    registry.declare("bad", DependentEffects(on=(1,), rule=bad), source="test")
    with pytest.raises(InvalidDeclaration, match=r"bad: the constant-dependent effects rule raised KeyError.*1=7"):
        registry.resolve("bad").at(("x", Const(7)))
    registry.declare("odd", DependentEffects(on=(0,), rule=lambda v: "pure"), source="test")
    with pytest.raises(InvalidDeclaration, match="must return an effects.Effects"):
        registry.resolve("odd").at((Const(1),))


def test_answers_are_validated_against_the_signature(registry: Registry) -> None:
    writes_the_flag = DependentEffects(on=("skip_clone",), rule=lambda flag: make_effects(writes=[2]),
                                       unknown=OPAQUE)
    registry.declare("all_reduce", writes_the_flag, source="test", signature=SIG)
    with pytest.raises(NonTensorWriteError, match="skip_clone"):
        registry.resolve("all_reduce").at(("x", Const("g0"), Const(True)))


def test_the_bound_is_validated_when_declared(registry: Registry) -> None:
    with pytest.raises(NonTensorWriteError):
        registry.declare("all_reduce", DependentEffects(on=(2,), rule=_all_reduce, unknown=make_effects(writes=[1])),
                         source="test", signature=SIG)


def test_conflicts_and_identical_redeclarations(declared: Registry) -> None:
    declared.declare("all_reduce", ALL_REDUCE, source="other", signature=SIG)  # the same rule: harmless
    with pytest.raises(ConflictingDeclarationError, match="different rules"):
        declared.declare("all_reduce", make_effects(read_writes=[0]), source="other")


def test_invalid_construction_is_refused() -> None:
    with pytest.raises(InvalidDeclaration, match="callable"):
        DependentEffects(on=(0,), rule="not a rule")  # type: ignore[arg-type]
    with pytest.raises(InvalidDeclaration, match="must be an Effects"):
        DependentEffects(on=(0,), rule=lambda v: effects.PURE, unknown="opaque")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Effects or a DependentEffects"):
        Registry().declare("op", "pure", source="test")  # type: ignore[arg-type]
