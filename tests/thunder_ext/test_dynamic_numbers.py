"""Python numbers that change from call to call become inputs of the trace (``thunder_ext.dynamic_numbers``): one
recompilation makes them dynamic, later values hit the cache, every value the trace made of them is guarded, and a
function the tracing cannot keep dynamic falls back to constant numbers — eager's results throughout."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402
import thunder  # noqa: E402
from thunder_ext import dynamic_numbers  # noqa: E402
from thunder_ext.prologue_replay import GuardKind  # noqa: E402

from executor_configs import CONFIGS  # noqa: E402


def _scaled(x, lr):
    return x * lr + 1


def _calls(jfn, fn, args_list):
    for args in args_list:
        torch.testing.assert_close(jfn(*args), fn(*args))


@pytest.mark.parametrize("executors", [None, ["torchcompile"]], ids=["default", "torchcompile"])
def test_a_changing_float_compiles_twice(executors):
    f = thunder_ext.jit(_scaled, executors=executors)
    x = torch.randn(4)
    _calls(f, _scaled, [(x, lr) for lr in (0.1, 0.2, 0.3, 0.05, 2.0)])
    assert thunder.cache_misses(f) == 2
    (reason,) = thunder_ext.explain_recompiles(f)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.NUMBER, "lr", 0.1, 0.2)
    assert dynamic_numbers.dynamic_paths(thunder.compile_data(f)) == ["lr"]
    assert "lr" in [a.name for a in thunder.last_traces(f)[-1].args]  # an input of the computation


def test_constant_numbers_when_asked():
    f = thunder_ext.jit(_scaled, dynamic_numbers=False)
    x = torch.randn(4)
    _calls(f, _scaled, [(x, lr) for lr in (0.1, 0.2, 0.3)])
    assert thunder.cache_misses(f) == 3


def test_the_switch_is_a_bool():
    with pytest.raises(thunder_ext.JitArgumentError, match="dynamic_numbers"):
        thunder_ext.jit(_scaled, dynamic_numbers="yes")


def _branch(x, n):
    if n > 2:
        return x * n
    return x - n


def test_a_branch_on_a_dynamic_number_is_guarded_by_its_decision():
    """``n > 2`` is recomputed from each call's ``n`` in the prologue: 3, 4, 5 share an entry, 1 takes the other
    branch (a new entry), 0 shares that one."""
    f = thunder_ext.jit(_branch)
    x = torch.randn(3)
    _calls(f, _branch, [(x, n) for n in (3, 4, 5, 1, 0, 7)])
    assert thunder.cache_misses(f) == 3
    last = thunder_ext.explain_recompiles(f)[-1]
    assert last.kind is GuardKind.NUMBER and last.path == "gt(n, 2)" and (last.old, last.new) == (True, False)


def _clamped_max(x, n):
    m = max(n - 3, 0)
    return x * m, m


def _clamped_min(x, n):
    m = min(3 - n, 0)
    return x * m, m


def _max_of_a_list(x, n):
    m = max([n - 3, 0, 1 - n])
    return x * m, m


def _min_of_a_float_tuple(x, f):
    m = min((f - 3.0, 0.0, -1.0 - f))
    return x * m, m


def _checked_calls(jfn, fn, args_list):
    """Each call equals eager's, the extreme's type too (``x`` is an ``int64`` tensor: an ``int`` keeps it one)."""
    for args in args_list:
        (got, got_m), (expected, expected_m) = jfn(*args), fn(*args)
        torch.testing.assert_close(got, expected)
        assert got_m == expected_m and type(got_m) is type(expected_m)


@pytest.mark.parametrize(("fn", "values", "executors"), [
    (_clamped_max, (5, 6, 2, 1, 7, 3), None), (_clamped_max, (5, 6, 2, 1, 7, 3), ["torchcompile"]),
    (_clamped_min, (5, 6, 2, 1, 7, 3), None), (_max_of_a_list, (5, 6, 2, 1, -4, 0), None),
    (_min_of_a_float_tuple, (5.0, 6.0, 1.5, -0.5, -3.0, 2.0), None)],
    ids=["max", "max-torchcompile", "min", "list", "float tuple"])
def test_max_and_min_of_dynamic_numbers_are_computed_at_run_time(fn, values, executors):
    """``max``/``min`` of a dynamic number is an operation of the trace, not a comparison decided while tracing:
    the call that flips the comparison (the third) and every later one hit the second compilation's entry, and its
    prologue checks no value made of ``n``."""
    f = thunder_ext.jit(fn, executors=executors)
    _checked_calls(f, fn, [(torch.arange(4), n) for n in values])
    assert thunder.cache_misses(f) == 2
    trace = str(thunder.last_traces(f)[-1])
    assert "thunder_effects_max(" in trace or "thunder_effects_min(" in trace
    assert "same_number" not in str(thunder.last_prologue_traces(f)[-1])


def _mixed_max(x, n):
    m = max(n - 3, 0.5)
    return x * m, m


def test_max_of_an_int_and_a_float_is_guarded():
    """The builtin returns the winner itself, an ``int`` or a ``float`` by the comparison — a type the trace cannot
    carry: the comparison is decided while tracing and guarded, the flip compiles once more."""
    f = thunder_ext.jit(_mixed_max)
    _checked_calls(f, _mixed_max, [(torch.arange(4), n) for n in (5, 6, 2, 1, 7, 3)])
    assert thunder.cache_misses(f) == 3
    assert thunder_ext.explain_recompiles(f)[-1].path == "lt(sub(n, 3), 0.5)"


def _branch_on_max(x, n):
    if max(n, 2) > 5:
        return x * n
    return x - n


def test_a_branch_on_a_max_is_guarded_by_recomputing_it():
    """``max(n, 2) > 5`` is recomputed from each call's ``n`` in the prologue (the max as eager's builtin): 7 and 9
    share the entry of 6, 1 takes the other branch, 3 and 0 share its entry."""
    f = thunder_ext.jit(_branch_on_max)
    x = torch.randn(3)
    _calls(f, _branch_on_max, [(x, n) for n in (6, 7, 1, 3, 9, 0)])
    assert thunder.cache_misses(f) == 3
    last = thunder_ext.explain_recompiles(f)[-1]
    assert last.path == "gt(max(n, 2), 5)" and (last.old, last.new) == (True, False)


def _sliced_by_max(x, n):
    return x[:max(n - 3, 1)]


def test_a_max_the_trace_makes_a_python_int_of_is_pinned():
    """A slice bound: one entry per length (2, 3, then 1 for both 2 and 1, then 4), each right."""
    f = thunder_ext.jit(_sliced_by_max)
    x = torch.randn(8)
    _calls(f, _sliced_by_max, [(x, n) for n in (5, 6, 2, 1, 7)])
    assert thunder.cache_misses(f) == 4


def _shaped(x, n):
    return x[:n] * n, torch.zeros(n) + n


def _loop(x, n):
    for _ in range(n):
        x = x * 2
    return x


@pytest.mark.parametrize("fn", [_shaped, _loop], ids=["shape", "loop count"])
def test_a_number_the_trace_makes_a_python_int_of_is_pinned(fn):
    """A slice length, a factory size (shapes are static) and a loop count: every value of ``n`` is its own entry,
    each right."""
    f = thunder_ext.jit(fn)
    x = torch.randn(8)
    _calls(f, fn, [(x, n) for n in (1, 2, 3, 2)])
    assert thunder.cache_misses(f) == 3


def _indexing(xs, i):
    return xs[i] * (i + 1)


def test_a_list_index_falls_back_to_constant_numbers():
    """Thunder's interpreter cannot index a list with a number proxy: the dynamic acquisition fails, the function
    keeps constant numbers (one entry per index, each right), and :func:`refusal` says why."""
    f = thunder_ext.jit(_indexing)
    xs = [torch.randn(2) for _ in range(3)]
    _calls(f, _indexing, [(xs, i) for i in (0, 1, 2, 1)])
    assert thunder.cache_misses(f) == 3
    assert "IntegerProxy" in dynamic_numbers.refusal(thunder.compile_data(f))


def _squared_loss(w, scale):
    return (w * scale).pow(2).sum() * scale


def _squared_loss_of_a_max(w, scale):
    return (w * max(scale - 1.0, 0.0)).pow(2).sum()


@pytest.mark.parametrize("loss, scales", [(_squared_loss, (0.5, 1.5, 3.0)),
                                          (_squared_loss_of_a_max, (2.0, 3.0, 0.5))])  # the max flips at the last
def test_gradients_flow_through_a_dynamic_number(loss, scales):
    f = thunder_ext.jit(loss)
    for scale in scales:
        w1, w2 = (torch.randn(3, generator=torch.Generator().manual_seed(1), requires_grad=True) for _ in range(2))
        f(w1, scale).backward()
        loss(w2, scale).backward()
        torch.testing.assert_close(w1.grad, w2.grad)
    assert thunder.cache_misses(f) == 2


class _Positioned(torch.nn.Module):
    """A module whose Python ``int`` attribute changes between calls (a decoding position)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.pos = 0

    def forward(self, x):
        return self.lin(x) * (self.pos + 1)


def test_a_module_attribute_that_changes_compiles_twice():
    eager = _Positioned()
    jitted = thunder_ext.jit(_Positioned())
    jitted.load_state_dict(eager.state_dict())
    x = torch.randn(2, 4)
    for pos in range(5):
        eager.pos = pos
        jitted._model.pos = pos
        torch.testing.assert_close(jitted(x), eager(x))
    assert thunder.cache_misses(jitted) == 2
    (reason,) = thunder_ext.explain_recompiles(jitted)
    assert (reason.kind, reason.path) == (GuardKind.ATTRIBUTE, "self.pos")


def _sgd(lr_schedule, config, foreach):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(3))]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach)
    scheduler = lr_schedule(opt)
    step = opt.step if config is None else thunder_ext.jit(opt.step, **config)
    for i in range(6):
        for k, p in enumerate(params):
            p.grad = torch.full_like(p, float(i + k + 1))
        step()
        scheduler.step()
    return [p.detach() for p in params], step


@pytest.mark.parametrize(("config", "foreach"), [
    ("default", False), pytest.param("default", True, marks=pytest.mark.slow),
    pytest.param("torchcompile-dataflow", False, marks=pytest.mark.slow),
    pytest.param("torchcompile-dataflow", True, marks=pytest.mark.slow)])
def test_an_lr_schedule_does_not_recompile_the_step(config, foreach):
    """The step compiles for the empty state, then once more for the filled state — where the learning rate has
    changed too, so it is an input from then on: the other four steps hit the cache; parameters as eager's."""
    schedule = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))  # noqa: E731
    expected, _ = _sgd(schedule, None, foreach)
    got, step = _sgd(schedule, CONFIGS[config], foreach)
    torch.testing.assert_close(got, expected)
    assert thunder.cache_misses(step) == 2


class _Counting(torch.nn.Module):
    """A module that updates Python numbers of its own in ``forward`` (a step counter, a decaying scale)."""

    def __init__(self) -> None:
        super().__init__()
        self.step, self.scale = 0, 1.0

    def forward(self, x):
        self.step += 1
        self.scale = self.scale * 0.5
        return x * self.step + self.scale


def test_numbers_the_call_writes_back_are_run_time_values():
    """The counter and the scale change at every call (the call itself changes them): dynamic from the second
    compilation on, computed at run time and written back — eager's values and attributes at every call."""
    eager, jitted_module = _Counting(), _Counting()
    jitted = thunder_ext.jit(jitted_module)
    x = torch.ones(2)
    for _ in range(5):
        torch.testing.assert_close(jitted(x), eager(x))
        assert (jitted_module.step, jitted_module.scale) == (eager.step, eager.scale)
        assert type(jitted_module.step) is int
    assert thunder.cache_misses(jitted) == 2
