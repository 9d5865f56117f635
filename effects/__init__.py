"""thunder-effects core: declare what ops do to memory and global resources, and reorder, fuse and delete
instructions only where those effects allow.

The core is framework-neutral (standard library + torch for schemas) and never imports Thunder.

* :mod:`effects.model` — the vocabulary (:class:`Effects`, :class:`Access`, :class:`Alias`, resources).
* :mod:`effects.registry` — op key → effects, with schema-derived defaults and an opaque fallback.
* :mod:`effects.schema` — effects from torch ``FunctionSchema`` alias annotations.
* :mod:`effects.program` — the neutral instruction/program type adapters map their IR to.
* :mod:`effects.errors` — the exception hierarchy.
"""

from __future__ import annotations

from .errors import (
    ConflictingDeclarationError,
    CycleError,
    DuplicateDefinitionError,
    EffectCheckError,
    EffectError,
    InvalidDeclaration,
    MissingOutputError,
    NonTensorWriteError,
    OperandOutOfRangeError,
    OrderViolation,
    ProgramError,
    UndeclaredOpError,
    UndefinedValueError,
    UnknownOperandError,
)
from .model import (
    GLOBAL,
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
from .program import Const, Instruction, Program
from .registry import Declaration, Registration, Registry, Resolution, default_registry
from .schema import derive, from_schema

__all__ = [
    # model
    "Access", "Alias", "Effects", "OperandEffect", "Param", "ParamKind", "Resource", "ResourceEffect",
    "Signature", "PURE", "OPAQUE", "GLOBAL", "IO", "rng", "comm", "make_effects",
    # registry and schemas
    "Registry", "Registration", "Declaration", "Resolution", "default_registry", "from_schema", "derive",
    # programs
    "Const", "Instruction", "Program",
    # errors
    "EffectError", "InvalidDeclaration", "UnknownOperandError", "OperandOutOfRangeError", "NonTensorWriteError",
    "MissingOutputError", "ConflictingDeclarationError", "UndeclaredOpError", "ProgramError",
    "UndefinedValueError", "DuplicateDefinitionError", "CycleError", "OrderViolation", "EffectCheckError",
]
