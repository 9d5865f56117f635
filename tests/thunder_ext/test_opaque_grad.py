"""Functional opaque torch calls are differentiated by torch (thunder_ext.declare.opaque_grad); opaque calls that
write their operands are still refused under autograd. The rule is one for every opaque operator: the tests use
``torch._foreach_*`` ops, which Thunder has no symbol for, trained for three steps (first call, then cache hits)."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder_ext.declare import opaque_grad, opaque_torch  # noqa: E402

from executor_configs import CALLS, CONFIGS, PARAMS  # noqa: E402


def _foreach_loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    prods = torch._foreach_mul([a, b], [b, a])  # list operands: gradients reach tensors nested in lists
    powers = torch._foreach_pow([a, b], 2.0)
    return prods[0].sum() + (prods[1] * 2).sum() + (powers[0] * powers[1]).sum()


@pytest.mark.parametrize("config", PARAMS)
def test_functional_opaque_calls_are_differentiated_as_eager(config: str) -> None:
    jitted = thunder_ext.jit(_foreach_loss, **CONFIGS[config])
    for _ in range(CALLS):
        a, b = torch.randn(3, 2, requires_grad=True), torch.randn(3, 2, requires_grad=True)
        ea, eb = (t.detach().clone().requires_grad_() for t in (a, b))
        got, expected = jitted(a, b), _foreach_loss(ea, eb)
        got.backward(), expected.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(a.grad, ea.grad)
        torch.testing.assert_close(b.grad, eb.grad)
    assert thunder.cache_misses(jitted) == 1


def test_rules_cover_functional_operators_only() -> None:
    names = {sym.name: overload for sym, overload in opaque_torch.operators()}
    assert opaque_grad.functional(names["aten__foreach_mul_List"])
    assert not opaque_grad.functional(names["aten__foreach_mul__List"])  # writes its operand
    ruled = {sym.id for sym, _ in opaque_torch.operators() if sym.id in opaque_grad.RULES}
    assert all(opaque_grad.functional(o) for sym, o in opaque_torch.operators() if sym.id in ruled)
    random = [o for s, o in opaque_torch.operators() if s.name.startswith("aten_uniform_")]
    assert random and not any(opaque_grad.functional(o) for o in random)  # draws random numbers


def test_a_writing_opaque_call_under_autograd_is_still_refused() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        b = a * 1
        torch._foreach_add_([b], 1.0)
        return b

    with pytest.raises(opaque_torch.OpaqueUnderAutogradError, match="aten__foreach_add__Scalar.*writes its operands"):
        thunder_ext.jit(f)(torch.randn(3, requires_grad=True))
