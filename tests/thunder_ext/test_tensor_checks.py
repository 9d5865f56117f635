"""thunder_ext.host.tensor_checks: a prologue's tensor checks as one call decide what the checks one by one decide,
and skip them only for tensors like those of a call that passed them."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch
from torch import nn

import thunder_ext  # noqa: F401  (the import shim, before thunder)
import thunder
from thunder_ext.host import cache_hit
from thunder_ext.host.tensor_checks import TensorChecks, TensorMatch

SPECS = [((2, 3), "cpu", torch.float32, False), ((3,), "cpu", torch.float32, True)]


class Recording:
    def __init__(self):
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        cache_hit._check_tensor_metadata(*args)


def tensors():
    return torch.randn(2, 3), torch.randn(3, requires_grad=True)


def test_a_call_like_the_first_passing_one_runs_no_single_check():
    one = Recording()
    checks = TensorChecks(SPECS, one)
    checks(*tensors())
    assert one.calls == 2 and checks.match is not None
    checks(*tensors())
    assert one.calls == 2


@pytest.mark.parametrize("change", [
    lambda a, b: (a.t().contiguous().t(), b),  # other strides: the checks run, and pass
    lambda a, b: (a, b.detach().requires_grad_()),  # the same metadata, another tensor: no check needed
])
def test_tensors_that_pass_the_checks_pass_whatever_the_match_says(change):
    one = Recording()
    checks = TensorChecks(SPECS, one)
    checks(*tensors())
    before = one.calls
    checks(*change(*tensors()))
    assert one.calls in (before, before + 2)


@pytest.mark.parametrize("bad", [
    lambda a, b: (a.double(), b),
    lambda a, b: (a, b.detach()),
    lambda a, b: (a[:1], b),
    lambda a, b: (a, 3.0),
])
def test_a_call_that_fails_a_check_fails_after_the_match_was_made(bad):
    checks = TensorChecks(SPECS, cache_hit._check_tensor_metadata)
    checks(*tensors())
    with pytest.raises(cache_hit.GuardFailed):
        checks(*bad(*tensors()))


def test_a_repeated_tensor_must_be_the_same_object_again():
    a, b = torch.randn(3), torch.randn(3)
    match = TensorMatch([a, b, a])
    assert match.holds([a, b, a])
    assert not match.holds([a, b, torch.randn(3)])
    assert "passed twice" in match.mismatch([a, b, torch.randn(3)])
    assert not match.holds([a, a, a])  # TensorGuards refuses a tensor twice where it was not


def test_the_hit_path_prologue_checks_a_models_tensors_in_one_call():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    eager = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    eager.load_state_dict(model.state_dict())
    jfn = thunder_ext.jit(lambda x: model(x))
    for step in range(3):
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(step))
        torch.testing.assert_close(jfn(x), eager(x))
    entry = thunder.compile_stats(jfn).interpreter_cache[0]
    names = cache_hit.guard(entry).__code__.co_names
    assert "thunder_effects_check_tensors" in names and "check_tensor_metadata" not in names
    model[0].weight.requires_grad_(False)  # a check fails: Thunder recompiles, and the result is eager's
    x = torch.randn(4, 3)
    torch.testing.assert_close(jfn(x), eager(x))
    assert thunder.cache_misses(jfn) == 2


def test_tensors_torch_cannot_describe_are_checked_one_by_one_on_every_call():
    one = Recording()
    checks = TensorChecks([((3,), "cpu", torch.float32, False)], one)
    sparse = torch.randn(3).to_sparse()
    for _ in range(2):
        checks(sparse)  # passes the check (a tensor of that shape, device, dtype); TensorGuards would not describe it
    assert one.calls == 2 and not checks.match.holds([sparse])
