"""thunder-effects core: declare what ops do to memory and global resources, and reorder, fuse and delete
instructions only where those effects allow.

The core is framework-neutral (standard library + torch for schemas) and never imports Thunder.

* :mod:`effects.model` — the vocabulary (:class:`Effects`, :class:`Access`, :class:`Alias`, resources).
* :mod:`effects.spec` — :func:`make_effects`: every spelling of effects (lists, mappings, schemas) as one.
* :mod:`effects.registry` — op key → effects, with schema-derived defaults and an opaque fallback;
  :mod:`effects.dependent` — declarations whose effects depend on constant arguments (``skip_clone=True``).
* :mod:`effects.schema` — effects from torch ``FunctionSchema`` alias annotations.
* :mod:`effects.program` — the neutral instruction/program type adapters map their IR to.
* :mod:`effects.errors` — the exception hierarchy.
* :mod:`effects.compose` — the effects of a group of instructions seen from outside (regions, composites).
* :mod:`effects.alias`, :mod:`effects.edges`, :mod:`effects.graph` — storage classes, the edge vocabulary and its
  policy sets, and the typed dependency graph (RAW/WAR/WAW/ORDER/...).
* :mod:`effects.dce`, :mod:`effects.schedule`, :mod:`effects.partition`, :mod:`effects.verify` — passes on the graph.
* :mod:`effects.explain` — why an edge exists, as text for people (messages, DOT).
* :mod:`effects.check` — run an op on samples and report where it contradicts its declaration.
* :mod:`effects.objects` — Python object state as slots named by identity (:class:`Heap`) and its write-back plan.
* :mod:`effects.functionalize`, :mod:`effects.reinplace` — the program without writes (for value transforms) and
  the way back to in-place kernels; :mod:`effects.aten_rules` holds the rules for ATen ops (imports torch).
"""

from __future__ import annotations

from ._util import gc_paused
from .alias import StorageClasses
from .check import CheckReport, Finding, Lie, Sample, check_op, checked_call
from .compose import compose
from .dce import dce, live_instructions
from .dependent import DependentEffects
from .edges import KEEPS_ALIVE, STORAGE_HAZARDS, Edge, EdgeKind
from .errors import (
    ConflictingDeclarationError,
    CycleError,
    DuplicateDefinitionError,
    EffectCheckError,
    ObjectStateError,
    EffectError,
    FunctionalizationError,
    InvalidArgumentError,
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
    describe_key,
    rng,
)
from .objects import DELETED, INTERPRETER_OWNED, Heap, Materialize, Slot, SlotKind, Write, WriteBack, interpreter_owned
from .functionalize import Functionalized, Rules, functionalize
from .graph import HAZARD_RULES, DependencyGraph
from .reinplace import InplaceRules, Layout, ReinplaceReport, Unview, ValueMeta, reinplace
from .partition import (Partitioning, Region, apply_partition, check_partition, consecutive_groups, partition,
                        partition_members, region_effects)
from .program import Const, Instruction, Program, operand_values
from .registry import Declaration, Origin, Registration, Registry, Resolution, default_registry
from .schedule import check_order, is_valid_order, random_order, reorder, toposort
from .schema import RNG_DEFAULT, derive, from_schema
from .spec import EFFECT_LISTS, EffectSpec, OperandRef, make_effects
from .verify import verify

__all__ = [
    # model
    "Access", "Alias", "Effects", "OperandEffect", "Param", "ParamKind", "Resource", "ResourceEffect",
    "Signature", "PURE", "OPAQUE", "GLOBAL", "IO", "rng", "comm", "make_effects", "EffectSpec", "EFFECT_LISTS",
    "OperandRef", "describe_key",
    # registry and schemas
    "Registry", "Registration", "Declaration", "Origin", "Resolution", "default_registry", "from_schema", "derive",
    "RNG_DEFAULT", "DependentEffects",
    # programs
    "Const", "Instruction", "Program", "operand_values", "compose",
    # dependency graph and passes
    "StorageClasses", "EdgeKind", "Edge", "KEEPS_ALIVE", "STORAGE_HAZARDS", "DependencyGraph", "HAZARD_RULES",
    "live_instructions", "dce",
    "toposort", "check_order", "is_valid_order", "random_order", "reorder",
    "Region", "Partitioning", "partition", "partition_members", "consecutive_groups", "region_effects",
    "apply_partition", "check_partition", "verify",
    # functionalization and its way back
    "functionalize", "Functionalized", "Rules", "reinplace", "InplaceRules", "ReinplaceReport", "ValueMeta",
    "Unview", "Layout",
    # errors
    "EffectError", "InvalidArgumentError", "InvalidDeclaration", "UnknownOperandError", "OperandOutOfRangeError",
    "NonTensorWriteError",
    "MissingOutputError", "ConflictingDeclarationError", "UndeclaredOpError", "ProgramError",
    "UndefinedValueError", "DuplicateDefinitionError", "CycleError", "OrderViolation", "EffectCheckError",
    "FunctionalizationError", "ObjectStateError",
    # Python object state
    "Heap", "Slot", "SlotKind", "Write", "Materialize", "WriteBack", "DELETED", "INTERPRETER_OWNED",
    "interpreter_owned",
    # truthfulness checks
    "check_op", "checked_call", "CheckReport", "Finding", "Lie", "Sample",
    # helpers for passes and adapters
    "gc_paused",
]
