"""Property-based testing for effect-aware passes (needs the ``test`` extra: ``pip install thunder-effects[test]``).

Generate executable programs over real torch ops, with aliasing inputs, in-place ops, views, generator-bound RNG
and opaque ops; draw valid schedules and legal partitions of their dependency graphs; and check any
transformation differentially against eager execution::

    from hypothesis import given
    from effects.testing import programs, check_pass

    def my_pass(program):  # Program -> Program
        ...

    def test_my_pass_preserves_semantics():
        check_pass(my_pass)

* :func:`programs`, :func:`schedules`, :func:`partitions` — Hypothesis strategies that shrink toward short programs
  of pure ops, the original order, and singleton regions.
* :class:`Oracle`, :func:`execute`, :func:`check_pass` — the eager interpreter and differential checker; a
  divergence raises :class:`Mismatch` with the case printed as runnable Python.
* :func:`check_functionalize`, :func:`check_round_trip` — functionalization and reinplacing (with the ATen rules)
  preserve semantics; :func:`value_metadata` and :func:`fresh_may_views` record what they need from a run.
* :data:`VOCABULARY` — the ops programs are made of (:class:`OpSpec`).
"""

from __future__ import annotations

from .case import Case, InputBinding, InputSpec, Recipe, program_python, to_python_function
from .oracle import Mismatch, Oracle, Outcome, UnknownOpError, check_pass, execute, fresh_may_views
from .roundtrip import check_functionalize, check_round_trip, functional_reference, value_metadata
from .strategies import partitions, programs, schedules
from .vocab import VOCABULARY, OpKind, OpSpec

__all__ = [
    "programs", "schedules", "partitions",
    "Case", "InputSpec", "InputBinding", "Recipe", "program_python", "to_python_function",
    "Oracle", "Outcome", "Mismatch", "UnknownOpError", "execute", "check_pass",
    "check_functionalize", "check_round_trip", "functional_reference", "value_metadata", "fresh_may_views",
    "VOCABULARY", "OpSpec", "OpKind",
]
