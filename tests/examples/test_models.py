"""The example models: deterministic builders, the self-check catches lost mutations, and every model runs
correctly through ``thunder_ext.jit`` (CPU torchcompile here; CUDA in the ``cuda`` subset)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("thunder")  # the models are in thunder_ext.testing

import torch  # noqa: E402

from thunder_ext.testing.models import MODELS, SIZES, check, compare, exact_float32  # noqa: E402

EXPECTED_MUTATIONS = {"cnn_bn": 6, "kv_decoder": 2, "adam": 9, "residual_mlp": 0}


def _identity(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


@pytest.mark.parametrize("name", list(MODELS))
def test_eager_self_check_sees_the_mutated_state(name: str) -> None:
    result = check(MODELS[name], _identity)
    assert result.ok, result.summary()
    assert len(result.mutated) == EXPECTED_MUTATIONS[name], result.mutated


@pytest.mark.parametrize("name", [n for n, k in EXPECTED_MUTATIONS.items() if k])
def test_check_reports_lost_mutations(name: str) -> None:
    """A "compiler" that runs on copies of the arguments returns the right values but loses every write."""

    def on_copies(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            copied = [[t.clone() for t in a] if isinstance(a, list) else a.clone() if isinstance(a, torch.Tensor)
                      else a for a in args]
            return fn(*copied)

        return run

    result = check(MODELS[name], on_copies, calls=1)
    if name == "cnn_bn":  # module buffers are not arguments: the copies do not hide them
        assert result.ok
    else:
        assert not result.ok
        assert all(m.name.startswith("state.") for m in result.mismatches)


def test_builders_are_deterministic() -> None:
    for model in MODELS.values():
        a, b = model.build(SIZES["tiny"], torch.device("cpu"), 3), model.build(SIZES["tiny"], torch.device("cpu"), 3)
        sa, sb = a.state(), b.state()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_compare_scales_atol_with_the_tensor_and_still_catches_errors() -> None:
    """Reordered float32 sums in a deep model's large outputs pass; the same absolute error at scale 1 does not,
    and neither does a relative error far above rtol at any scale."""
    large = torch.tensor([700.0, 1e-3])
    assert compare(large, large + torch.tensor([0.0, 5e-4]), rtol=1e-4, atol=1e-5) == (1, [])
    small = torch.tensor([1.0, 1e-3])
    assert compare(small, small + torch.tensor([0.0, 5e-4]), rtol=1e-4, atol=1e-5)[1]
    assert compare(large, large * 1.01, rtol=1e-4, atol=1e-5)[1]


def test_exact_float32_turns_tf32_off_inside_and_restores_the_settings() -> None:
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with pytest.raises(RuntimeError), exact_float32():
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
            raise RuntimeError("restored on errors too")
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def _thunder_ext_jit(device: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    thunder_ext = pytest.importorskip("thunder_ext")
    from thunder.executors.torch_compile import torch_compile_ex

    return lambda fn: thunder_ext.jit(fn, executors=[torch_compile_ex])


@pytest.mark.parametrize("name", list(MODELS))
def test_thunder_ext_jit_matches_eager_cpu(name: str) -> None:
    result = check(MODELS[name], _thunder_ext_jit("cpu"))
    assert result.ok, result.summary()


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(MODELS))
def test_thunder_ext_jit_matches_eager_cuda(name: str) -> None:
    result = check(MODELS[name], _thunder_ext_jit("cuda"), size="small", device="cuda")
    assert result.ok, result.summary()


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(MODELS))
def test_torch_executor_with_reinplace_matches_eager_cuda(name: str) -> None:
    thunder_ext = pytest.importorskip("thunder_ext")
    from thunder_ext.passes.inplace_kernels import Reinplace

    result = check(MODELS[name], lambda fn: thunder_ext.jit(fn, executors=[], transforms=[Reinplace()]),
                   size="small", device="cuda")
    assert result.ok, result.summary()
