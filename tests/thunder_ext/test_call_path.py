"""The ``thunder_ext.jit`` call path: patches held only while compiling, the compile hook and the runner methods
pinned, plain ``thunder.jit`` untouched by the hook."""

from __future__ import annotations

import importlib
import inspect

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402
import thunder  # noqa: E402
from thunder_ext import _patches  # noqa: E402

jit_mod = importlib.import_module("thunder_ext.jit")  # `thunder_ext.jit` the attribute is the function


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
    assert params == _patches.EXPECTED_PARAMETERS[patch.name], f"{patch.where} changed its parameters"
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
    monkeypatch.setattr(jit_mod, "verify_jitted", verified.append)
    jfn = thunder_ext.jit(lambda a: a.add_(1), executors=["torch"], verify=True)
    jfn(torch.ones(2))
    jfn(torch.ones(2))
    assert len(verified) == 1
    jfn(torch.ones(3))
    assert len(verified) == 2
