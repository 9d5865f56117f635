"""Recompile reasons (:mod:`thunder_ext.recompiles`): after a cache miss, ``thunder_ext.explain_recompiles(jfn)``
names the check that failed (its kind), the path the user writes, and the entry's vs the call's value; the first
compilation and cache hits record nothing; ``RecompileWarning`` after ``recompile_warning_after`` recompilations names
the most frequent reason."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402
import thunder  # noqa: E402
from thunder_ext import JitArgumentError, RecompileReason, RecompileWarning, explain_recompiles  # noqa: E402
from thunder_ext.prologue_replay import GuardKind  # noqa: E402


def _only_reason(jfn) -> RecompileReason:
    reasons = explain_recompiles(jfn)
    assert len(reasons) == 1, [str(r) for r in reasons]
    assert thunder.cache_misses(jfn) == 2  # stock Thunder's count: one compilation and one recompilation
    return reasons[0]


def _axpy(x, y, n):
    return x + y * n


def test_shape():
    f = thunder_ext.jit(_axpy)
    f(torch.ones(3), torch.ones(3), 2)
    f(torch.ones(4), torch.ones(4), 2)
    reason = _only_reason(f)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.SHAPE, "x", (3,), (4,))
    assert reason.compilation == 2 and reason.entry == 0
    assert "shape of x changed: (3,) -> (4,)" in str(reason)


def test_dtype():
    f = thunder_ext.jit(_axpy)
    f(torch.ones(3), torch.ones(3), 2)
    f(torch.ones(3), torch.ones(3, dtype=torch.float64), 2)
    reason = _only_reason(f)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.DTYPE, "y", torch.float32,
                                                                   torch.float64)


def test_requires_grad():
    f = thunder_ext.jit(_axpy)
    f(torch.ones(3), torch.ones(3), 2)
    f(torch.ones(3, requires_grad=True), torch.ones(3), 2)
    reason = _only_reason(f)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.REQUIRES_GRAD, "x", False, True)


@pytest.mark.parametrize("dynamic", [False, True])
def test_python_number_value_and_type(dynamic):
    """A number that changed value is the first reason; then (``dynamic_numbers``, the default) the number is an input
    of the trace and only its type is checked, or (constant numbers) its value and type."""
    f = thunder_ext.jit(_axpy, dynamic_numbers=dynamic)
    x = torch.ones(3)
    f(x, x.clone(), 2)
    f(x, x.clone(), 3)
    f(x, x.clone(), 3.0)
    first, second = explain_recompiles(f)
    assert (first.kind, first.path, first.old, first.new) == (GuardKind.NUMBER, "n", 2, 3)
    assert (second.kind, second.path) == (GuardKind.NUMBER, "n")
    assert [failure.entry for failure in second.failures] == [1, 0]  # every entry, newest first
    assert type(second.new) is float  # the type changed, the value did not
    assert second.old == (3 if dynamic is False else "int")


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x) * self.scale


def test_module_attribute_value():
    model = _Scaled()
    jmodel = thunder_ext.jit(model)
    x = torch.ones(3)
    jmodel(x)
    model.scale = 3.0  # on the module: Thunder's ThunderModule reads the original's attributes
    jmodel(x)
    reason = _only_reason(jmodel)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.ATTRIBUTE, "self.scale", 2.0, 3.0)


def test_module_parameter():
    model = _Scaled()
    jmodel = thunder_ext.jit(model)
    jmodel(torch.ones(3))
    model.lin.weight.requires_grad_(False)  # frozen
    jmodel(torch.ones(3))
    reason = _only_reason(jmodel)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.REQUIRES_GRAD, "self.lin.weight", True,
                                                                   False)


def _add_into(x, y):
    x.add_(y)
    return x


def test_identity_and_aliasing():
    f = thunder_ext.jit(_add_into)
    x = torch.ones(3)
    f(x, torch.ones(3))
    f(x, x)
    reason = _only_reason(f)
    assert (reason.kind, reason.path) == (GuardKind.ALIASING, "x, y")
    assert (str(reason.old), str(reason.new)) == ("no storage shared", "x and y share storage")


def _scaled_if_a(x, d):
    return x * 2 if "a" in d else x


def test_dict_key_set():
    f = thunder_ext.jit(_scaled_if_a)
    x = torch.ones(3)
    f(x, {"a": 1})
    f(x, {"a": 1, "b": 2})
    reason = _only_reason(f)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.DICT_KEYS, "d", ["a"], ["a", "b"])


def test_optimizer_state_gaining_a_key():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)

    def step():
        opt.step()

    f = thunder_ext.jit(step)
    p.grad = torch.ones(3)
    f()
    f()  # the first step made opt.state[p]['momentum_buffer']
    reason = _only_reason(f)
    assert (reason.kind, reason.old, reason.new) == (GuardKind.DICT_KEYS, [], ["momentum_buffer"])
    assert reason.path == "opt.state[opt.param_groups[0]['params'][0]]"


def _scaled_by_len(x, items):
    return x * len(items)


def test_list_length():
    f = thunder_ext.jit(_scaled_by_len)
    x = torch.ones(3)
    f(x, [1])
    f(x, [1, 2])
    reason = _only_reason(f)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.LENGTH, "items", 1, 2)


def test_number_of_arguments_and_grad_mode():
    f = thunder_ext.jit(lambda *xs: xs[0] * 2)
    x = torch.ones(3)
    f(x)
    f(x, x)
    with torch.no_grad():
        f(x)
    arguments, grad_mode = explain_recompiles(f)
    assert (arguments.kind, arguments.path, arguments.old, arguments.new) == (GuardKind.LENGTH, "args", 1, 2)
    assert (grad_mode.kind, grad_mode.path, grad_mode.old, grad_mode.new) == (
        GuardKind.STATE, "torch.is_grad_enabled()", True, False)


def test_the_first_compilation_and_cache_hits_record_nothing():
    f = thunder_ext.jit(_axpy)
    x, y = torch.ones(3), torch.ones(3)
    f(x, y, 2)
    assert explain_recompiles(f) == []
    f(torch.zeros(3), torch.zeros(3), 2)
    assert explain_recompiles(f) == [] and thunder.cache_hits(f) == 1
    f(torch.ones(2), torch.ones(2), 2)
    f(x, y, 2)  # a hit of the first entry
    assert len(explain_recompiles(f)) == 1 and thunder.cache_misses(f) == 2


def test_stock_thunder_jit_records_nothing():
    f = thunder.jit(_axpy)
    f(torch.ones(3), torch.ones(3), 2)
    f(torch.ones(4), torch.ones(4), 2)
    assert thunder.cache_misses(f) == 2 and explain_recompiles(f) == []


def test_the_warning_names_the_most_frequent_reason():
    f = thunder_ext.jit(_axpy, recompile_warning_after=3, dynamic_shapes=False)  # every new size recompiles
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for size, n in ((1, 1), (2, 1), (2, 2), (3, 2)):  # shape, number, shape
            f(torch.ones(size), torch.ones(size), n)
    recompiles = [w for w in caught if issubclass(w.category, RecompileWarning)]
    assert len(recompiles) == 1 and issubclass(RecompileWarning, UserWarning)
    message = str(recompiles[0].message)
    assert "compiled again 3 times" in message and "(2 of 3): shape of x changed" in message
    assert "(2,) -> (3,)" in message
    assert [r.kind for r in explain_recompiles(f)] == [GuardKind.SHAPE, GuardKind.NUMBER, GuardKind.SHAPE]


def test_no_warning_when_switched_off():
    f = thunder_ext.jit(_axpy, recompile_warning_after=None, dynamic_shapes=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileWarning)
        for size in (1, 2, 3):
            f(torch.ones(size), torch.ones(size), 1)
    assert len(explain_recompiles(f)) == 2


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8"])
def test_recompile_warning_after_is_checked(value):
    with pytest.raises(JitArgumentError, match=r"recompile_warning_after=.*positive int, or None"):
        thunder_ext.jit(_axpy, recompile_warning_after=value)
