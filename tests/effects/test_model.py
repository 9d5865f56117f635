"""The effect vocabulary (:mod:`effects.model`): normal form, queries, composition laws."""

from __future__ import annotations

import dataclasses

import pytest
from effect_strategies import any_effects, transparent_effects
from hypothesis import given

from effects import (
    GLOBAL,
    InvalidDeclaration,
    IO,
    OPAQUE,
    PURE,
    Access,
    Alias,
    Effects,
    OperandEffect,
    Param,
    ParamKind,
    Resource,
    ResourceEffect,
    Signature,
    comm,
    make_effects,
    rng,
)

SIG = Signature((Param("self"), Param("src"), Param("alpha", ParamKind.OTHER)), num_outputs=1)


# --- composition laws --------------------------------------------------------------------------------------------
@given(any_effects, any_effects, any_effects)
def test_union_is_associative(a: Effects, b: Effects, c: Effects) -> None:
    assert (a | b) | c == a | (b | c) == a.union(b, c)


@given(any_effects, any_effects)
def test_union_is_commutative(a: Effects, b: Effects) -> None:
    assert a | b == b | a


@given(any_effects)
def test_union_is_idempotent(a: Effects) -> None:
    assert a | a == a and a.union() == a


@given(any_effects)
def test_pure_is_the_identity(a: Effects) -> None:
    assert a | PURE == a == PURE | a


@given(any_effects)
def test_opaque_absorbs(a: Effects) -> None:
    assert a | OPAQUE == OPAQUE == OPAQUE | a


@given(transparent_effects, transparent_effects)
def test_union_keeps_every_write_alias_and_ordered_resource(a: Effects, b: Effects) -> None:
    u = a | b
    assert u.written == a.written | b.written
    assert u.aliases == a.aliases | b.aliases
    assert u.ordered_resources == a.ordered_resources | b.ordered_resources
    for i in range(6):
        left, right = a.access(i), b.access(i)
        expected = None if left is None and right is None else (left or Access(0)) | (right or Access(0))
        assert u.access(i) == expected


# --- accesses ----------------------------------------------------------------------------------------------------
def test_pure_write_is_distinct_from_read_write() -> None:
    assert Access.WRITE != Access.READ_WRITE
    assert Access.WRITE.writes and not Access.WRITE.reads
    assert Access.READ_WRITE.writes and Access.READ_WRITE.reads
    assert [str(a) for a in (Access.READ, Access.WRITE, Access.READ_WRITE)] == ["read", "write", "read-write"]


def test_read_and_write_of_one_operand_merge_into_read_write() -> None:
    assert make_effects(reads=[0], writes=[0]) == make_effects(read_writes=[0])


def test_constructor_normalises_operands_to_one_sorted_entry_each() -> None:
    eff = Effects((OperandEffect(2, Access.READ), OperandEffect(0, Access.WRITE), OperandEffect(2, Access.WRITE)))
    assert eff.operands == (OperandEffect(0, Access.WRITE), OperandEffect(2, Access.READ_WRITE))


def test_named_and_positional_declarations_are_equal() -> None:
    named = make_effects(read_writes=["self"], reads=["src"], aliases=[(0, "self")], signature=SIG)
    positional = make_effects(read_writes=[0], reads=[1], aliases=[(0, 0)])
    assert named == positional
    assert [e.name for e in named.operands] == ["self", "src"]  # names kept for display
    assert str(named) == "read-write(0:self), read(1:src), out0 aliases 0"


def test_access_queries() -> None:
    eff = make_effects(writes=[1], reads=[0])
    assert eff.access(0) is Access.READ and eff.access(1) is Access.WRITE and eff.access(5) is None
    assert eff.written == {1}


# --- aliases and resources ---------------------------------------------------------------------------------------
def test_may_alias_differs_from_definite_alias() -> None:
    assert make_effects(aliases=[(0, 0, True)]) != make_effects(aliases=[(0, 0)])
    assert str(Alias(0, 1, may=True)) == "out0 may alias 1"


def test_resources_are_named_and_parametric() -> None:
    assert str(rng("cuda:0")) == "rng[cuda:0]" and rng("cuda:0") != rng("cpu")
    assert str(comm("tp")) == "comm[tp]" and str(GLOBAL) == "global" and str(IO) == "io"
    assert Resource("comm", "tp") == comm("tp")


def test_ordered_wins_when_one_resource_is_both_ordered_and_unordered() -> None:
    eff = Effects(resources=frozenset({ResourceEffect(IO, ordered=False), ResourceEffect(IO, ordered=True)}))
    assert eff.resources == {ResourceEffect(IO, ordered=True)} and eff.ordered_resources == {IO}


def test_unordered_resources_are_not_ordering_but_not_pure_either() -> None:
    eff = Effects(resources=frozenset({ResourceEffect(IO, ordered=False)}))
    assert eff.ordered_resources == frozenset() and not eff.is_pure
    assert str(eff) == "io (unordered)"


def test_tensor_and_resource_effects_compose_on_one_op() -> None:
    eff = make_effects(writes=[0], resources=[rng("cpu"), ResourceEffect(comm("world"), ordered=False)])
    assert eff.written == {0} and eff.ordered_resources == {rng("cpu")}
    assert str(eff) == "write(0), comm[world] (unordered), rng[cpu]"


# --- pure and opaque ---------------------------------------------------------------------------------------------
def test_pure_has_no_effects() -> None:
    assert PURE.is_pure and str(PURE) == "pure" and PURE.access(0) is None and PURE.ordered_resources == set()


def test_opaque_reads_and_writes_everything_and_orders_on_global() -> None:
    assert not OPAQUE.is_pure and str(OPAQUE) == "opaque"
    assert all(OPAQUE.access(i) is Access.READ_WRITE for i in range(10))
    assert OPAQUE.ordered_resources == {GLOBAL}


def test_opaque_has_one_canonical_form() -> None:
    assert Effects(operands=(OperandEffect(0, Access.READ),), opaque=True) == OPAQUE


# --- remap, immutability -----------------------------------------------------------------------------------------
def test_remap_renumbers_and_drops_missing_operands() -> None:
    eff = make_effects(read_writes=[0], reads=[2], aliases=[(0, 0), (1, 2)], resources=[IO])
    assert eff.remap({0: 5}) == make_effects(read_writes=[5], aliases=[(0, 5)], resources=[IO])
    assert OPAQUE.remap({}) == OPAQUE


def test_effects_are_frozen_and_hashable() -> None:
    eff = make_effects(writes=[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        eff.opaque = True  # type: ignore[misc]
    assert {eff: 1}[make_effects(writes=[0])] == 1


def test_validate_names_operands_from_the_signature() -> None:
    assert [e.name for e in make_effects(writes=[0], reads=[1]).validate(SIG).operands] == ["self", "src"]
    assert OPAQUE.validate(SIG) is OPAQUE


# --- policy queries ----------------------------------------------------------------------------------------------
def test_side_effects_are_writes_resources_and_the_unknown() -> None:
    assert make_effects(read_writes=[0]).has_side_effects
    assert make_effects(resources=[ResourceEffect(IO, ordered=False)]).has_side_effects
    assert OPAQUE.has_side_effects
    assert not make_effects(reads=[0], aliases=[(0, 0)]).has_side_effects  # a view is not a side effect
    assert not PURE.has_side_effects


def test_an_implementation_covers_what_it_keeps() -> None:
    op = make_effects(read_writes=[0], aliases=[(0, 0)], resources=[IO])
    assert (op | make_effects(writes=[1])).covers(op)  # adding effects is fine
    assert OPAQUE.covers(op) and PURE.covers(OPAQUE)
    assert make_effects(writes=[0], aliases=[(0, 0)], resources=[IO]).uncovered(op) == (
        "read-write(0) (the implementation declares a pure write, which drops the read)",)
    assert make_effects(read_writes=[0], resources=[IO]).uncovered(op) == ("out0 aliases 0",)
    assert make_effects(read_writes=[0], aliases=[(0, 0)], resources=[ResourceEffect(IO, ordered=False)]).uncovered(
        op) == ("io",)


def test_make_effects_accepts_every_spelling() -> None:
    sig = Signature((Param("src"), Param("dst")), num_outputs=1)
    expected = make_effects(reads=[0], read_writes=[1], aliases=[(0, 1)])
    assert make_effects("my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)", signature=sig) == expected
    assert make_effects({"reads": ["src"], "read_writes": ["dst"], "aliases": [(0, "dst")]}, signature=sig) == expected
    assert make_effects(expected, signature=sig) == expected
    assert make_effects(make_effects(reads=[0]), read_writes=["dst"], aliases=[(0, 1)], signature=sig) == expected


def test_make_effects_names_what_is_wrong() -> None:
    sig = Signature((Param("src"), Param("dst")), num_outputs=1)
    with pytest.raises(InvalidDeclaration, match=r"unknown effect list\(s\) \['writez'\]"):
        make_effects({"writez": [0]})
    with pytest.raises(InvalidDeclaration, match="cannot parse the schema"):
        make_effects("not a schema")
    with pytest.raises(InvalidDeclaration, match="do not match the operator's parameters"):
        make_effects("my_copy_(Tensor dst, Tensor(a!) src) -> Tensor(a)", signature=sig)
    with pytest.raises(TypeError, match="effects must be Effects, a schema, or a mapping"):
        make_effects(3.5)


# --- capture (CUDA graphs) -----------------------------------------------------------------------------------------
def test_uncapturable_is_a_fact_for_capture_only() -> None:
    sync = Effects(uncapturable=True)
    assert not sync.capturable and not sync.is_pure and str(sync) == "uncapturable"
    assert not sync.has_side_effects and sync.ordered_resources == frozenset()  # neither kept alive nor ordered
    assert PURE.capturable and make_effects(writes=[0]).capturable
    assert not OPAQUE.capturable and OPAQUE.uncapturable is False  # unknown is never captured; one canonical form


def test_uncapturable_survives_union_remap_and_validation() -> None:
    sync = Effects((OperandEffect(1, Access.READ),), uncapturable=True)
    assert not (sync | make_effects(writes=[0])).capturable and (sync | OPAQUE) == OPAQUE
    assert not sync.remap({1: 0}).capturable
    assert not sync.validate(SIG).capturable
    assert not make_effects(sync, reads=[0]).capturable


def test_an_implementation_must_keep_uncapturable() -> None:
    required = make_effects(Effects(uncapturable=True), reads=[0])
    assert make_effects(reads=[0]).uncovered(required) == (
        "uncapturable (the implementation may be captured into a CUDA graph)",)
    assert required.covers(required) and required.covers(make_effects(reads=[0]))
