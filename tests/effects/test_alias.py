"""Storage classes: views join their base, inputs are distinct unless declared aliasing."""

from __future__ import annotations

import pytest
from graph_helpers import I, declare_ops

from effects import Program, StorageClasses, UndefinedValueError, make_effects
from effects.graph import resolve_effects


@pytest.fixture
def classes(registry):
    declare_ops(registry)
    registry.declare("maybe_view", make_effects(aliases=[(0, 0, True)]), source="tests")
    registry.declare("cat", make_effects(aliases=[(0, 0)]), source="tests")

    def _classes(*insts, inputs=("x", "y"), returns=(), input_aliases=()):
        program = Program(insts, inputs, returns, input_aliases)
        return StorageClasses.from_effects(program, resolve_effects(program, registry))

    return _classes


def test_view_chain_joins_base(classes):
    s = classes(I("view", "x", out="v"), I("view", "v", out="w"), I("add", "w", 1, out="a"))
    assert s.storage("w") == s.storage("v") == s.storage("x") != s.storage("a")
    assert s.representative(s.storage("w")) == "x"


def test_may_alias_is_alias(classes):
    s = classes(I("maybe_view", "x", out="r"))
    assert s.may_alias("r", "x")


def test_list_operand_view_joins_every_tensor(classes):
    s = classes(I("cat", ("x", "y"), out="c"))
    assert s.storage("c") == s.storage("x") == s.storage("y")


def test_inputs_distinct_unless_declared(classes):
    assert not classes().may_alias("x", "y")
    assert classes(input_aliases=(frozenset({"x", "y"}),)).may_alias("x", "y")


def test_visible_storages_are_inputs_and_returns(classes):
    s = classes(I("add", "x", "y", out="a"), I("view", "a", out="va"), I("add", "x", 1, out="b"), returns=("va",))
    assert s.visible_storages == {s.storage("x"), s.storage("y"), s.storage("a")}
    assert s.storage("b") not in s.visible


def test_build_with_effects_of_callable(registry):
    declare_ops(registry)
    program = Program((I("view", "x", out="v"),), ("x",))
    s = StorageClasses.build(program, lambda inst: registry.lookup(inst.op))
    assert s.may_alias("v", "x") and s.count == 1


def test_unknown_value_is_an_error(classes):
    s = classes()
    with pytest.raises(UndefinedValueError, match="'zz' is not a value"):
        s.storage("zz")
