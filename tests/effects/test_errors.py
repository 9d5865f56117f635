"""Malformed declarations and misuse raise typed errors whose messages name the op and operand and say how to fix.

One test per bad-input case; every case goes through the public API a user calls (``make_effects`` and
``Registry.declare`` on a real op).
"""

from __future__ import annotations

import pytest
import torch

import effects
from effects import (
    ConflictingDeclarationError,
    EffectError,
    InvalidDeclaration,
    MissingOutputError,
    NonTensorWriteError,
    OperandOutOfRangeError,
    Registry,
    UndeclaredOpError,
    UnknownOperandError,
    make_effects,
)

ADD_ = torch.ops.aten.add_.Tensor  # aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1)
FOREACH_ADD_ = torch.ops.aten._foreach_add_.Scalar  # returns nothing


def _signature(op: object) -> effects.Signature:
    return effects.derive(op)[1]


def test_unknown_operand_name() -> None:
    with pytest.raises(UnknownOperandError) as info:
        make_effects(writes=["dst"], signature=_signature(ADD_), op="aten::add_.Tensor")
    message = str(info.value)
    assert "aten::add_.Tensor" in message and "'dst'" in message
    assert "0:self, 1:other, 2:alpha" in message and "Use one of these names" in message


def test_operand_name_without_a_signature() -> None:
    with pytest.raises(UnknownOperandError, match=r"'self' is given by name but no signature.*signature="):
        make_effects(writes=["self"])


def test_operand_position_out_of_range(registry: Registry) -> None:
    with pytest.raises(OperandOutOfRangeError) as info:
        registry.declare(ADD_, make_effects(read_writes=[3]), source="test")
    message = str(info.value)
    assert "aten::add_.Tensor" in message and "position 3 is out of range" in message
    assert "3 operand(s): 0:self, 1:other, 2:alpha" in message
    assert isinstance(info.value, IndexError)  # also catchable as the builtin category


def test_negative_operand_position() -> None:
    with pytest.raises(OperandOutOfRangeError, match="non-negative int, got -1"):
        make_effects(reads=[-1])


def test_write_on_a_non_tensor_operand(registry: Registry) -> None:
    with pytest.raises(NonTensorWriteError) as info:
        registry.declare(ADD_, make_effects(writes=[2]), source="test")
    message = str(info.value)
    assert "aten::add_.Tensor" in message and "operand 2 ('alpha')" in message and "not a tensor" in message
    assert "remove the write" in message


def test_alias_of_a_non_tensor_operand(registry: Registry) -> None:
    with pytest.raises(NonTensorWriteError, match=r"output 0 a view of operand 2 \('alpha'\).*Only tensors"):
        registry.declare(ADD_, make_effects(aliases=[(0, 2)]), source="test")


def test_alias_to_a_missing_output(registry: Registry) -> None:
    with pytest.raises(MissingOutputError) as info:
        registry.declare(ADD_, make_effects(aliases=[(1, "self")], signature=_signature(ADD_)), source="test")
    message = str(info.value)
    assert "output 1" in message and "operand 0 ('self')" in message and "1 output(s): 0..0" in message


def test_alias_to_an_output_of_an_op_that_returns_nothing(registry: Registry) -> None:
    with pytest.raises(MissingOutputError, match=r"aten::_foreach_add_\.Scalar.*returns nothing.*remove the alias"):
        registry.declare(FOREACH_ADD_, make_effects(aliases=[(0, 0)]), source="test")


def test_conflicting_declarations_name_both_sources_and_the_difference(registry: Registry) -> None:
    registry.declare("my::op", make_effects(read_writes=[0]), source="lib-A")
    with pytest.raises(ConflictingDeclarationError) as info:
        registry.declare("my::op", make_effects(writes=[0], resources=[effects.IO]), source="lib-B")
    message = str(info.value)
    assert "'lib-A' declared: read-write(0)" in message and "'lib-B' declares:  write(0), io" in message
    assert "only in old: read-write(0); only in new: write(0), io" in message and "override=True" in message


def test_strict_registry_undeclared_op() -> None:
    with pytest.raises(UndeclaredOpError, match=r"my::op.*effects\.PURE"):
        Registry(strict=True).resolve("my::op")


def test_every_declaration_error_is_an_effect_error_and_a_value_error() -> None:
    for cls in (UnknownOperandError, OperandOutOfRangeError, NonTensorWriteError, MissingOutputError):
        assert issubclass(cls, InvalidDeclaration) and issubclass(cls, EffectError) and issubclass(cls, ValueError)
    for cls in (ConflictingDeclarationError, UndeclaredOpError, effects.ProgramError, effects.CycleError,
                effects.OrderViolation, effects.EffectCheckError):
        assert issubclass(cls, EffectError)
