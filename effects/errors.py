"""One exception hierarchy for thunder-effects.

Every error names what is wrong (the op, the operand by position *and* name where known, the instruction)
and says how to fix it. Validation never uses bare ``assert`` (``python -O`` strips those).

Hierarchy::

    EffectError
    ├── InvalidArgumentError          a public function got the wrong kind of argument (also a TypeError)
    ├── InvalidDeclaration            a declaration is malformed
    │   ├── UnknownOperandError       names an operand the op does not have
    │   ├── OperandOutOfRangeError    a position past the op's last operand
    │   ├── NonTensorWriteError       a write/alias on an operand that is not a tensor
    │   └── MissingOutputError        an alias to an output the op does not produce
    ├── ConflictingDeclarationError   two sources declare different effects for one op
    ├── UndeclaredOpError             strict registry asked about an op nobody declared
    ├── ProgramError                  a neutral program is ill-formed
    │   ├── UndefinedValueError       use before definition / unknown returned value
    │   └── DuplicateDefinitionError  a value defined twice
    ├── CycleError                    a dependency cycle (prints the cycle)
    ├── OrderViolation                an order or transformed program breaks a dependency edge
    ├── FunctionalizationError        a write has no value semantics to derive (or a rule is wrong)
    ├── ObjectStateError              a write to Python object state that an epilogue cannot replay
    └── EffectCheckError              an op's runtime behaviour contradicts its declaration
"""

from __future__ import annotations

__all__ = [
    "EffectError",
    "InvalidArgumentError",
    "InvalidDeclaration",
    "UnknownOperandError",
    "OperandOutOfRangeError",
    "NonTensorWriteError",
    "MissingOutputError",
    "ConflictingDeclarationError",
    "UndeclaredOpError",
    "ProgramError",
    "UndefinedValueError",
    "DuplicateDefinitionError",
    "CycleError",
    "OrderViolation",
    "FunctionalizationError",
    "EffectCheckError",
    "ObjectStateError",
]


class EffectError(Exception):
    """Base class of every error raised by thunder-effects."""


class InvalidArgumentError(EffectError, TypeError):
    """A public function got the wrong kind of argument (a string where a list of operands belongs, a name where a
    :class:`~effects.model.Resource` belongs, an object that is not a registry); the message names the argument,
    shows what it got and says what it expects."""


class InvalidDeclaration(EffectError, ValueError):
    """An effect declaration is malformed for the op it describes."""


class UnknownOperandError(InvalidDeclaration):
    """A declaration names an operand the op's signature does not have."""


class OperandOutOfRangeError(InvalidDeclaration, IndexError):
    """A declaration refers to an operand position past the op's last operand."""


class NonTensorWriteError(InvalidDeclaration):
    """A declaration writes (or aliases) an operand that is not a tensor."""


class MissingOutputError(InvalidDeclaration):
    """A declaration aliases an output index the op does not produce."""


class ConflictingDeclarationError(EffectError):
    """Two sources declared different effects for the same op without ``override=True``."""


class UndeclaredOpError(EffectError, LookupError):
    """A strict registry was asked for the effects of an op nobody declared."""


class ProgramError(EffectError, ValueError):
    """A neutral program is ill-formed."""


class UndefinedValueError(ProgramError):
    """A value is used (or returned) before any input or instruction defines it."""


class DuplicateDefinitionError(ProgramError):
    """A value is defined by more than one input or instruction output."""


class CycleError(EffectError):
    """The dependency relation (or a contraction of it) has a cycle."""


class OrderViolation(EffectError):
    """An order, or a transformed program, violates a dependency edge of the original program."""


class FunctionalizationError(EffectError, ValueError):
    """:func:`effects.functionalize` cannot give a write value semantics: a write through a view with no inverse,
    to storage an opaque result may share, or to inputs that alias at run time in an undescribed way."""


class EffectCheckError(EffectError, AssertionError):
    """Running an op showed behaviour its effect declaration does not allow (or promises and lacks)."""


class ObjectStateError(EffectError, NotImplementedError):
    """A traced program wrote Python object state that the write-back cannot replay (a value an epilogue cannot
    carry, an object of a class with no source); the message names the object's path and the slot, and the fix."""
