"""The ``thunder_ext.jit`` call path: patches held only while compiling, the compile hook and the runner methods
pinned, plain ``thunder.jit`` untouched by the hook."""

from __future__ import annotations

import functools
import inspect

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402
import thunder  # noqa: E402
from thunder_ext.host import patches as _patches  # noqa: E402
from thunder_ext import compilation  # noqa: E402
from thunder_signatures import EXPECTED_PARAMETERS  # noqa: E402

from thunder_ext import calls as calls_mod  # noqa: E402


@pytest.fixture
def applies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records every :func:`_patches.apply` (the compile hook looks it up at call time)."""
    calls: list[int] = []
    original = _patches.apply

    def counting() -> None:
        calls.append(1)
        original()

    monkeypatch.setattr(_patches, "apply", counting)
    return calls


_HOOKS = (_patches.COMPILE_HOOK, _patches.ADD_TRANSFORM_HOOK)


@pytest.mark.parametrize("patch", [*_patches.RUNNER_METHODS, *_HOOKS], ids=lambda p: p.where)
def test_bound_and_hooked_targets_are_pinned(patch: _patches.Patch) -> None:
    expected = (patch.original, patch.replacement) if patch in _HOOKS else (patch.original,)
    assert any(patch.current() is f for f in expected), f"{patch.where} changed; update _patches.py"
    params = tuple(inspect.signature(patch.original).parameters)
    assert params == EXPECTED_PARAMETERS[patch.name], f"{patch.where} changed its parameters"
    stand_in = tuple(inspect.signature(patch.replacement).parameters)
    assert stand_in == (params if patch in _HOOKS else ("original", *params))


def test_patches_are_held_only_while_compiling(applies: list[int]) -> None:
    jfn = thunder_ext.jit(lambda a: a.mul_(2), executors=["torch"])
    a = torch.ones(3)
    jfn(a)
    assert len(applies) == 1 and not _patches.applied()
    for _ in range(3):
        jfn(a)
    assert len(applies) == 1, "a cache hit must not touch the patches"
    torch.testing.assert_close(a, torch.full((3,), 16.0))
    jfn(torch.ones(5))  # new shape: Thunder recompiles, with the patches
    assert len(applies) == 2 and not _patches.applied()


def test_add_transform_keeps_holding_only_while_compiling(applies: list[int]) -> None:
    """``add_transform`` (what ``ddp``/``fsdp`` call) re-jits a ``thunder_ext.jit`` function: its compilations'
    holds are released after the call too (they were kept for the rest of the process)."""
    from thunder.core.transforms import Transform, add_transform

    class Nothing(Transform):
        pass

    for fn in (lambda a: a.mul_(2), torch.nn.Linear(3, 2)):
        jfn = add_transform(thunder_ext.jit(fn, executors=["torch"]), transform=Nothing())
        jfn(torch.ones(3))
        assert applies and not _patches.applied()
    plain = add_transform(thunder.jit(lambda a: a + 1, executors=["torch"]), transform=Nothing())
    applies.clear()
    torch.testing.assert_close(plain(torch.ones(2)), torch.full((2,), 2.0))
    assert not applies and not _patches.applied()


def test_the_autograd_bridge_sees_the_fast_dummies_torch_once_hooked() -> None:
    thunder_ext.jit(lambda a: a + 1, executors=["torch"])  # installs the hooks
    hook = _patches.AUTOGRAD_DUMMIES
    assert hook.original is torch and hook.current() is hook.replacement, f"{hook.where} changed; update patches.py"


def test_plain_thunder_jit_takes_no_hold(applies: list[int]) -> None:
    thunder_ext.jit(lambda a: a + 1, executors=["torch"])  # installs the hook
    assert _patches.COMPILE_HOOK.current() is _patches.COMPILE_HOOK.replacement
    x = torch.arange(4.0)
    jfn = thunder.jit(lambda a: a * 3, executors=["torch"])
    torch.testing.assert_close(jfn(x), x * 3)
    assert not applies and not _patches.applied()


def test_a_failed_compilation_releases_its_hold() -> None:
    def bad(a):
        raise ValueError("no")

    jfn = thunder_ext.jit(bad, executors=["torch"])
    with pytest.raises(ValueError, match="no"):
        jfn(torch.ones(2))
    assert not _patches.applied()
    assert _patches._calls.depth == 0 and _patches._calls.holds == 0


def test_verify_runs_after_each_compilation_only(monkeypatch: pytest.MonkeyPatch) -> None:
    verified: list[object] = []
    monkeypatch.setattr(compilation, "verify_jitted", verified.append)
    jfn = thunder_ext.jit(lambda a: a.add_(1), executors=["torch"], verify=True)
    jfn(torch.ones(2))
    jfn(torch.ones(2))
    assert len(verified) == 1
    jfn(torch.ones(3))
    assert len(verified) == 2


# --- the cache-hit path (thunder_ext.host.cache_hit) -----------------------------------------------------------------
from thunder_ext.host import cache_hit as fast_call  # noqa: E402


def _counting_hit_path(fn, **kwargs):
    """``thunder_ext.jit(fn)`` with its slow path (Thunder's, which compiles on a miss) counted."""
    slow_calls = []
    original = calls_mod.hit_path

    def counting(jfn, slow):
        @functools.wraps(slow)
        def counted(*args, **kw):
            slow_calls.append(1)
            return slow(*args, **kw)

        return original(jfn, counted)

    calls_mod.hit_path = counting
    try:
        call = thunder_ext.jit(fn, executors=["torch"], **kwargs)
    finally:
        calls_mod.hit_path = original
    return call, call, slow_calls


def add_into(a, b):
    a.add_(1)
    return b * 2


def test_hidden_aliasing_switch_recompiles():
    """``f(x, y)`` then ``f(x, x)``: the same shapes, but the second call's arguments share storage, so the
    prologue's aliasing check fails and Thunder compiles again (and the result sees the write through ``a``)."""
    call, jfn, slow = _counting_hit_path(add_into)
    x, y = torch.zeros(3), torch.zeros(3)
    torch.testing.assert_close(call(x, y), torch.zeros(3))
    torch.testing.assert_close(call(x, y), torch.zeros(3))
    assert len(slow) == 1 and thunder.cache_misses(jfn) == 1 and thunder.cache_hits(jfn) == 1
    x = torch.zeros(3)
    torch.testing.assert_close(call(x, x), torch.full((3,), 2.0))
    assert len(slow) == 2 and thunder.cache_misses(jfn) == 2
    torch.testing.assert_close(call(x, x), torch.full((3,), 4.0))  # the aliased entry now hits
    assert len(slow) == 2 and thunder.cache_hits(jfn) == 2
    v = torch.zeros(6)
    # views of one storage are aliased too: the aliased entry hits, and its effect graph keeps them apart (stock
    # Thunder's entry for f(x, x) returns 2s here: its trace made a and b one tensor)
    torch.testing.assert_close(call(v[:3], v[3:]), torch.zeros(3))
    assert thunder.cache_misses(jfn) == 2 and thunder.cache_hits(jfn) == 3


def scale(a, k=2.0):
    return a * k


TRIGGERS = {
    "shape": ((torch.ones(3),), {}, (torch.ones(4),), {}),
    "rank": ((torch.ones(3),), {}, (torch.ones(3, 1),), {}),
    "dtype": ((torch.ones(3),), {}, (torch.ones(3, dtype=torch.float64),), {}),
    "requires_grad": ((torch.ones(3),), {}, (torch.ones(3, requires_grad=True),), {}),
    "number value": ((torch.ones(3), 2.0), {}, (torch.ones(3), 3.0), {}),
    "number type": ((torch.ones(3), 2.0), {}, (torch.ones(3), 2), {}),
    "keyword": ((torch.ones(3),), {}, (torch.ones(3),), {"k": 5.0}),
    "argument count": ((torch.ones(3),), {}, (torch.ones(3), 2.0), {}),
    "device": ((torch.ones(3),), {}, (torch.ones(3, device="meta"),), {}),
}


@pytest.mark.parametrize("trigger", sorted(TRIGGERS))
def test_every_recompile_trigger_recompiles(trigger):
    args1, kw1, args2, kw2 = TRIGGERS[trigger]
    call, jfn, slow = _counting_hit_path(scale)
    call(*args1, **kw1)
    call(*args1, **kw1)
    assert (len(slow), thunder.cache_misses(jfn), thunder.cache_hits(jfn)) == (1, 1, 1)
    out = call(*args2, **kw2)
    assert (len(slow), thunder.cache_misses(jfn)) == (2, 2), f"{trigger} must recompile"
    if out.device.type != "meta":
        torch.testing.assert_close(out, scale(*args2, **kw2))
    call(*args2, **kw2)
    call(*args1, **kw1)  # both entries now hit
    assert (len(slow), thunder.cache_misses(jfn), thunder.cache_hits(jfn)) == (2, 2, 3)


@pytest.mark.parametrize("mode", ["no_grad", "default_dtype"])
def test_global_state_triggers_recompile(mode):
    call, jfn, slow = _counting_hit_path(lambda a: a * 2)
    x = torch.ones(3)
    call(x)
    call(x)
    ctx = torch.no_grad() if mode == "no_grad" else _default_dtype(torch.float64)
    with ctx:
        call(x)
    assert thunder.cache_misses(jfn) == 2 and len(slow) == 2
    call(x)
    assert thunder.cache_misses(jfn) == 2 and thunder.cache_hits(jfn) == 2


class _default_dtype:
    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.old = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.old)


def test_autocast_takes_thunders_path():
    call, jfn, slow = _counting_hit_path(lambda a: a * 2)
    x = torch.ones(3)
    call(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        call(x)
    assert len(slow) == 2


@pytest.mark.parametrize("case", ["plain", "aliased", "views", "nested", "kwargs", "parameter", "scalars"])
def test_cache_info_is_thunders(case):
    """The dictionary the prologues check, built as Thunder's ``populate_cache_info`` builds it."""
    x, y = torch.ones(3), torch.zeros(3)
    v = torch.zeros(6)
    args, kwargs = {
        "plain": ((x, y), {}),
        "aliased": ((x, y, x), {}),
        "views": ((v[:3], x, v[3:], v), {}),
        "nested": (([x, y, x], (v, v[1:])), {}),
        "kwargs": ((x,), {"b": x, "c": [y, y]}),
        "parameter": ((torch.nn.Parameter(x), x), {}),
        "scalars": ((1, "s", None, x), {"k": 2.0}),
    }[case]
    jfn = thunder.jit(lambda *a, **k: a, executors=["torch"])
    cd = jfn._lc_cd
    expected: dict = {}
    cd.populate_cache_info(expected, *args, **kwargs)
    assert fast_call.cache_info(cd, args, kwargs) == expected
    assert fast_call.alias_string(args, kwargs) == expected["alias_tensor_indices"]


def test_default_device_is_torchs():
    assert fast_call.default_device() == torch.get_default_device()
    with torch.device("meta"):
        assert fast_call.default_device() == torch.get_default_device() == torch.device("meta")


def test_hit_path_of_thunder_ext_jit_keeps_autograd_and_modules():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    reference = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    reference.load_state_dict(model.state_dict())
    jmodel = thunder_ext.jit(model, executors=["torch"])
    x = torch.randn(2, 4)
    for _ in range(3):
        jmodel(x).sum().backward()
        reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert thunder.cache_misses(jmodel) == 1 and thunder.cache_hits(jmodel) == 2
    with torch.no_grad():
        model[0].weight.mul_(2)  # an in-place update of a parameter: same metadata, the hit sees it
        reference[0].weight.mul_(2)
    torch.testing.assert_close(jmodel(x), reference(x))
    model[0].weight.requires_grad_(False)  # requires_grad of a parameter: the prologue checks it
    jmodel(x)
    assert thunder.cache_misses(jmodel) == 2


def test_thunder_ext_jit_hit_and_epilogue():
    def f(a, b):
        a.mul_(2)
        return a + b, {"n": 3}

    jfn = thunder_ext.jit(f, executors=["torch"])
    x, y = torch.ones(2), torch.ones(2)
    for k in range(1, 4):
        out, extra = jfn(x, y)
        torch.testing.assert_close(out, torch.full((2,), 2.0**k + 1))
        assert extra == {"n": 3}
    assert thunder.cache_misses(jfn) == 1 and thunder.cache_hits(jfn) == 2


def _raises(fn, *args):
    try:
        fn(*args)
    except Exception:
        return True
    return False


def test_fast_checks_decide_as_thunders():
    from thunder.core.proxies import IntegerProxy
    from thunder.core.trace import TraceCtx, tracectx
    from thunder.executors import pythonex

    t = torch.ones(2, 3)
    with tracectx(TraceCtx()):
        sym = IntegerProxy(name="s0", value=3)
    tensor_cases = [
        (t, (2, 3), "cpu", torch.float32, False), (t, (2, 4), "cpu", torch.float32, False),
        (t, (2,), "cpu", torch.float32, False), (t, (2, 3, 1), "cpu", torch.float32, False),
        (t, (2, 3), "meta", torch.float32, False), (t, (2, 3), "cuda:0", torch.float32, False),
        (t, (2, 3), "cpu", torch.float64, False), (t, (2, 3), "cpu", torch.float32, True),
        (t, (2, sym), "cpu", torch.float32, False), (t, (3, sym), "cpu", torch.float32, False),
        (torch.ones(2, 3, device="meta"), (2, 3), "meta", torch.float32, False),
        (torch.nn.Parameter(t), (2, 3), "cpu", torch.float32, True), (3, (), "cpu", torch.float32, False),
        (torch.tensor(1.0), (), "cpu", torch.float32, False),
    ]
    for case in tensor_cases:
        assert _raises(fast_call._check_tensor_metadata, *case) == _raises(
            pythonex._check_tensor_shape_and_metadata_impl, *case), case
    nan = float("nan")
    number_cases = [(1, 1), (1, 1.0), (1.0, 1.0), (nan, nan), (nan, 1.0), (True, True), (True, 1), (2, 3)]
    for case in number_cases:
        assert _raises(fast_call._check_number_type_and_value, *case) == _raises(
            pythonex._check_number_type_and_value_impl, *case), case
    for case in [((1, 2), 2), ([], 0), ([1], 2), ({}, 0)]:
        assert _raises(fast_call._check_len, *case) == _raises(pythonex._check_len_impl, *case)
    for case in [("a", "a"), ("a", "b"), ("", "")]:
        assert _raises(fast_call._check_string_value, *case) == _raises(pythonex._check_string_value_impl, *case)
    for case in [(torch.float32, torch.float32), (torch.float32, torch.float64),
                 (torch.device("cpu"), torch.device("cpu")), (torch.device("cpu"), torch.device("meta"))]:
        assert _raises(fast_call._check_literal_like, *case) == _raises(pythonex._check_literal_like_impl, *case)


def test_guard_runs_thunders_prologue_code_with_the_fast_checks():
    jfn = thunder.jit(lambda a, k: a * k, executors=["torch"])
    jfn(torch.ones(2), 2.0)
    entry = jfn._lc_cs.interpreter_cache[0]
    checked = fast_call.guard(entry)
    assert checked is not entry.prologue_fn and checked.__globals__["check_tensor_metadata"] is (
        fast_call._check_tensor_metadata)
    assert checked.__code__ is inspect.unwrap(entry.prologue_fn).__code__ or checked.__code__.co_name == "prologue"
    token = thunder._cache_info_ctx.set(fast_call.cache_info(jfn._lc_cd, (torch.ones(2), 2.0), {}))
    try:
        inps, _ = checked(torch.ones(2), 2.0)
        assert len(inps) >= 1
        with pytest.raises(fast_call.GuardFailed):
            checked(torch.ones(3), 2.0)
        with pytest.raises(fast_call.GuardFailed):
            checked(torch.ones(2), 3.0)
    finally:
        thunder._cache_info_ctx.reset(token)
