"""A number known only at run time (``Tensor.item()`` in the trace) converted to a Python value raises
``UnknownNumberError`` instead of tracing Thunder's ``bool(None)`` (``False``) into the program — the class of bug
that made ``torch.optim.Adafactor(foreach=False)`` silently wrong (``max(eps2, p.norm().item() / ...)``,
``p.add_(u, alpha=<run-time number>)``); ``max``/``min`` of such numbers trace as run-time ops, and are right
on either side of the comparison without recompiling. (A Python branch on such a number in the traced code itself is
decided on the call's values and guarded: ``tests/thunder_ext/test_data_dependent.py``.)"""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder_ext.eager.unknown_numbers import UnknownNumberError  # noqa: E402


def _max_of_numbers(x):
    return x * max(0.5, x.norm().item())  # the builtin converts `>` to bool


def _min_of_numbers(x):
    return x * min(x.sum().item(), 2.0, x.norm().item())


def _alpha(x):
    return x.add(x, alpha=x.norm().item())  # Thunder's add meta branches on `alpha != 1`


def _python_float(x):
    return x * float(x.norm().item())


def test_a_run_time_number_converted_to_a_python_float_raises_instead_of_a_baked_value():
    with pytest.raises(UnknownNumberError, match=r"known only when the program runs"):
        thunder_ext.jit(_python_float, executors=["torch"])(torch.ones(3))


def test_thunders_own_branch_on_a_run_time_number_is_decided_on_the_call():
    """``add``'s meta skips ``alpha`` when ``alpha != 1``: decided on the call's values and guarded (two outcomes,
    two compilations), never Thunder's ``bool(None)``."""
    jf = thunder_ext.jit(_alpha, executors=["torch"])
    for x in (torch.full((4,), 0.5), torch.full((4,), 2.0), torch.full((4,), 0.5), torch.full((4,), 3.0)):
        torch.testing.assert_close(jf(x), _alpha(x))  # alpha = x.norm(): 1.0 for the first, 4.0 for the second
    assert thunder.cache_misses(jf.__wrapped__) == 2


@pytest.mark.parametrize("fn", [_max_of_numbers, _min_of_numbers])
def test_max_and_min_of_run_time_numbers_are_computed_at_run_time(fn):
    jf = thunder_ext.jit(fn, executors=["torch"])
    for scale in (0.1, 1.0, 4.0):  # either side of the constant
        x = torch.full((3,), scale)
        torch.testing.assert_close(jf(x), fn(x))
    assert thunder.cache_misses(jf.__wrapped__) == 1


def test_arithmetic_on_a_run_time_number_still_traces():
    def f(x):
        n = x.norm().item()
        return x * (n ** -0.5 + 1) if x.shape[0] > 2 else x  # a known number (a shape) still converts

    jf = thunder_ext.jit(f, executors=["torch"])
    for scale in (1.0, 4.0):
        x = torch.full((3,), scale)
        torch.testing.assert_close(jf(x), f(x))


@pytest.mark.slow
@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
def test_arithmetic_on_a_run_time_number_stays_out_of_torch_compile_regions(fusion_type):
    """A region's torch executor has no kernel for numbers (Thunder: "Failed to find an executor for bound symbol
    prims.pow"): the partition keeps number arithmetic out of torch.compile regions (Adafactor's
    ``step_float ** beta2_decay``)."""
    def f(x):
        n = x.sum().item()
        return x * (n ** -0.8) + n * 2

    jf = thunder_ext.jit(f, executors=["torchcompile"], fusion_type=fusion_type)
    for scale in (1.0, 3.0):
        x = torch.full((3,), scale)
        torch.testing.assert_close(jf(x), f(x))
    assert thunder.cache_misses(jf.__wrapped__) == 1


def test_a_known_false_inside_a_symbol_thunder_does_not_record_converts():
    """Thunder pushes a ``None`` scope for a symbol it does not record (``Symbol.__call__``); a known ``False``
    number converted there is ``False`` (Thunder's ``test_grad.py`` collection met it under ``install()``)."""
    from thunder.core.proxies import IntegerProxy, NumberProxy
    from thunder.core.trace import TraceCtx, tracectx

    from thunder_ext.compilation import STAND_INS

    original, stand_in = STAND_INS["__bool__"]
    assert original is NumberProxy.__bool__
    trace = TraceCtx()
    with tracectx(trace):
        trace.push_scope(None)
        try:
            assert stand_in(original, IntegerProxy(name="n", value=False)) is False
        finally:
            trace.pop_scope()
