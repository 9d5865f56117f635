"""Differential fuzzing of thunder_ext.jit: programs from effects.testing.programs(), turned into plain Python
functions (effects.testing.to_python_function), run through thunder_ext.jit on CPU with the torchcompile executor
(both fusion types) and compared with eager on fresh inputs: returned values and every input after the call
(thunder_ext.testing.check_jit).

Vocabulary: everything except the generator-bound RNG ops (``uniform_``/``normal`` with ``generator=``): Thunder
0.2.6 cannot trace a ``torch.Generator`` argument, so those programs would test Thunder's tracer, not the effect
pipeline. ``opaque_axpy_`` stays (Thunder traces into it). Programs stock ``thunder.jit`` rejects with the same
error (e.g. ``copy_`` broadcasting its source) are discarded (``assume``), not failures.

The default run fuzzes the torch executor (derandomized); the torchcompile runs are ``slow`` (torch.compile takes
seconds per program on 2 cores; CI runs them); ``benchmarks/fuzz_thunder.py`` runs thousands and prints the counts.
"""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402

from effects.testing import VOCABULARY, OpKind, programs  # noqa: E402
from thunder_ext.testing import ThunderUnsupported, check_jit, check_jit_grad  # noqa: E402

OPS = tuple(op for op in VOCABULARY if op.kind is not OpKind.RNG)
"""The fuzzed vocabulary (see the module docstring for what is left out and why)."""

CASES = programs(ops=OPS, max_instructions=8, generators=0)


@pytest.mark.slow
@pytest.mark.parametrize("check", [check_jit, check_jit_grad], ids=["values", "gradients"])
@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=CASES)
def test_thunder_ext_jit_matches_eager(fusion_type, check, case):
    try:
        check(case, executors=["torchcompile"], fusion_type=fusion_type)
    except ThunderUnsupported:
        assume(False)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=CASES)
def test_thunder_ext_jit_torch_executor_matches_eager(case):
    """No fusion executor: every in-place op reaches the torch executor, where thunder_ext.jit reinplaces."""
    try:
        check_jit(case, executors=["torch"])
    except ThunderUnsupported:
        assume(False)


@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=CASES)
def test_thunder_ext_jit_gradients_match_eager(case):
    """The gradient oracle: every input base the program does not write requires grad; outputs, inputs after the
    call and gradients vs eager (``benchmarks/fuzz_thunder.py --grad`` runs thousands)."""
    try:
        check_jit_grad(case, executors=["torch"])
    except ThunderUnsupported:
        assume(False)

