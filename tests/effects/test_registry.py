"""The effect registry (:mod:`effects.registry`): lookup order, undo handles, conflicts, isolation."""

from __future__ import annotations

import pytest
import torch
from effect_strategies import any_effects
from hypothesis import given
from hypothesis import strategies as st

import effects
from effects import OPAQUE, PURE, ConflictingDeclarationError, Registry, UndeclaredOpError, make_effects

aten = torch.ops.aten
OPS = ("my::a", "my::b", "my::c")


# --- lookup order --------------------------------------------------------------------------------------------------
def test_declared_wins_over_schema(registry: Registry) -> None:
    eff = make_effects(read_writes=[0], reads=[1], aliases=[(0, 0)], resources=[effects.IO])
    with registry.declare(aten.add_.Tensor, eff, source="test"):
        resolution = registry.resolve(aten.add_.Tensor)
        assert (resolution.effects, resolution.origin, resolution.source) == (eff, "declared", "test")
        assert resolution.signature is not None and resolution.signature.name_of(0) == "self"
    assert registry.resolve(aten.add_.Tensor).origin == "derived"


def test_schema_default_when_undeclared(registry: Registry) -> None:
    resolution = registry.resolve(aten.copy_.default)
    assert resolution.origin == "derived" and resolution.source == "schema"
    assert resolution.effects == effects.derive(aten.copy_.default)[0]


def test_unknown_op_is_opaque_never_pure(registry: Registry) -> None:
    resolution = registry.resolve("my::mystery")
    assert resolution.effects == OPAQUE and resolution.origin == "unknown"


def test_strict_registry_raises_for_undeclared_ops() -> None:
    strict = Registry(strict=True)
    with pytest.raises(UndeclaredOpError, match=r"my::mystery.*registry\.declare"):
        strict.lookup("my::mystery")
    assert strict.lookup(aten.add_.Tensor) == effects.derive(aten.add_.Tensor)[0]  # schema defaults still apply
    with strict.declare("my::mystery", PURE, source="test"):
        assert strict.lookup("my::mystery") == PURE


def test_custom_derivers_run_in_order() -> None:
    first = Registry(derivers=(lambda op: (PURE, None) if op == "my::known" else None,))
    assert first.resolve("my::known").origin == "derived" and first.lookup("my::other") == OPAQUE


# --- handles -------------------------------------------------------------------------------------------------------
def test_undo_reveals_the_previous_declaration_and_is_idempotent(registry: Registry) -> None:
    old = make_effects(reads=[0])
    new = make_effects(read_writes=[0])
    first = registry.declare("my::a", old, source="lib")
    second = registry.declare("my::a", new, source="plugin", override=True)
    assert registry.lookup("my::a") == new
    second.undo()
    second.undo()
    assert not second.active and registry.lookup("my::a") == old
    first.undo()
    assert "my::a" not in registry and registry.lookup("my::a") == OPAQUE


def test_undo_out_of_order_removes_exactly_that_declaration(registry: Registry) -> None:
    eff = make_effects(reads=[0])
    first = registry.declare("my::a", eff, source="one")
    second = registry.declare("my::a", eff, source="two")
    first.undo()
    assert registry.declarations("my::a") == (second.declaration,)


def test_identical_redeclaration_from_another_source_is_allowed(registry: Registry) -> None:
    eff = make_effects(writes=[0])
    with registry.declare("my::a", eff, source="one"), registry.declare("my::a", eff, source="two"):
        assert registry.resolve("my::a").source == "two"


def test_declare_rejects_non_effects(registry: Registry) -> None:
    with pytest.raises(TypeError, match="must be an Effects"):
        registry.declare("my::a", "pure", source="test")  # type: ignore[arg-type]


def test_declare_validates_against_the_schema(registry: Registry) -> None:
    with pytest.raises(effects.OperandOutOfRangeError):
        registry.declare(aten.add_.Tensor, make_effects(writes=[9]), source="test")
    assert registry.snapshot() == {}


# --- isolation -----------------------------------------------------------------------------------------------------
def test_copy_is_isolated(registry: Registry) -> None:
    with registry.declare("my::a", PURE, source="test"):
        clone = registry.copy(strict=True)
        with clone.declare("my::b", PURE, source="test"):
            assert "my::b" not in registry
        assert clone.strict and clone.lookup("my::a") == PURE
    assert "my::a" in clone and "my::a" not in registry


def test_default_registry_is_one_process_wide_instance() -> None:
    assert effects.default_registry() is effects.default_registry()
    with effects.default_registry().declare("my::global_op", PURE, source="test"):
        assert effects.default_registry().lookup("my::global_op") == PURE
    assert "my::global_op" not in effects.default_registry()


# --- properties ----------------------------------------------------------------------------------------------------
declarations = st.lists(st.tuples(st.sampled_from(OPS), any_effects, st.sampled_from(["lib", "plugin"])),
                        max_size=8)


@given(declarations, declarations, st.randoms(use_true_random=False))
def test_declare_then_undo_restores_the_registry_exactly(setup, extra, rnd) -> None:
    registry = Registry()
    for op, eff, source in setup:
        registry.declare(op, eff, source=source, override=True)
    before = registry.snapshot()
    handles = [registry.declare(op, eff, source=source, override=True) for op, eff, source in extra]
    rnd.shuffle(handles)
    for handle in handles:
        handle.undo()
    assert registry.snapshot() == before
    assert all(registry.resolve(op).effects == (before[op][-1].effects if op in before else OPAQUE) for op in OPS)


@given(any_effects, any_effects, st.sampled_from(OPS))
def test_conflicting_declarations_always_raise(first: effects.Effects, second: effects.Effects, op: str) -> None:
    registry = Registry()
    registry.declare(op, first, source="lib-A")
    before = registry.snapshot()
    if first == second:
        registry.declare(op, second, source="lib-B").undo()
    else:
        with pytest.raises(ConflictingDeclarationError) as info:
            registry.declare(op, second, source="lib-B")
        message = str(info.value)
        assert op in message and "'lib-A'" in message and "'lib-B'" in message and "override=True" in message
        assert str(first) in message and str(second) in message
    assert registry.snapshot() == before
