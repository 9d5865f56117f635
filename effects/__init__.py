"""thunder-effects core: declare what ops do to memory and global resources, and reorder, fuse and delete
instructions only where those effects allow.

The core is framework-neutral (standard library + torch for schemas) and never imports Thunder.

* :mod:`effects.model` — the vocabulary (:class:`Effects`, :class:`Access`, :class:`Alias`, resources).
* :mod:`effects.registry` — op key → effects, with schema-derived defaults and an opaque fallback.
* :mod:`effects.schema` — effects from torch ``FunctionSchema`` alias annotations.
* :mod:`effects.program` — the neutral instruction/program type adapters map their IR to.
* :mod:`effects.errors` — the exception hierarchy.
* :mod:`effects.alias`, :mod:`effects.graph` — storage classes and the typed dependency graph (RAW/WAR/WAW/ORDER/...).
* :mod:`effects.dce`, :mod:`effects.schedule`, :mod:`effects.partition`, :mod:`effects.verify` — passes on the graph.
* :mod:`effects.check` — run an op on samples and report where it contradicts its declaration.
* :mod:`effects.functionalize`, :mod:`effects.reinplace` — the program without writes (for value transforms) and
  the way back to in-place kernels; :mod:`effects.aten_rules` holds the rules for ATen ops (imports torch).
"""

from __future__ import annotations

from .alias import StorageClasses
from .check import CheckReport, Finding, Lie, Sample, check_op, checked_call
from .dce import dce, live_instructions
from .errors import (
    ConflictingDeclarationError,
    CycleError,
    DuplicateDefinitionError,
    EffectCheckError,
    EffectError,
    FunctionalizationError,
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
from .functionalize import Functionalized, Rules, functionalize
from .graph import HAZARD_RULES, DependencyGraph, Edge, EdgeKind
from .functionalize import Functionalized, Rules, functionalize
from .reinplace import InplaceRules, Layout, ReinplaceReport, Unview, ValueMeta, reinplace
from .partition import Partitioning, Region, apply_partition, check_partition, partition, region_effects
from .program import Const, Instruction, Program
from .registry import Declaration, Registration, Registry, Resolution, default_registry
from .schedule import check_order, is_valid_order, random_order, reorder, toposort
from .schema import derive, from_schema
from .verify import verify

__all__ = [
    # model
    "Access", "Alias", "Effects", "OperandEffect", "Param", "ParamKind", "Resource", "ResourceEffect",
    "Signature", "PURE", "OPAQUE", "GLOBAL", "IO", "rng", "comm", "make_effects",
    # registry and schemas
    "Registry", "Registration", "Declaration", "Resolution", "default_registry", "from_schema", "derive",
    # programs
    "Const", "Instruction", "Program",
    # dependency graph and passes
    "StorageClasses", "EdgeKind", "Edge", "DependencyGraph", "HAZARD_RULES", "live_instructions", "dce",
    "toposort", "check_order", "is_valid_order", "random_order", "reorder",
    "Region", "Partitioning", "partition", "region_effects", "apply_partition", "check_partition", "verify",
    # functionalization and its way back
    "functionalize", "Functionalized", "Rules", "reinplace", "InplaceRules", "ReinplaceReport", "ValueMeta",
    "Unview", "Layout",
    # errors
    "EffectError", "InvalidDeclaration", "UnknownOperandError", "OperandOutOfRangeError", "NonTensorWriteError",
    "MissingOutputError", "ConflictingDeclarationError", "UndeclaredOpError", "ProgramError",
    "UndefinedValueError", "DuplicateDefinitionError", "CycleError", "OrderViolation", "EffectCheckError",
    "FunctionalizationError",
    # truthfulness checks
    "check_op", "checked_call", "CheckReport", "Finding", "Lie", "Sample",
]
