"""Python state the interpreter answers as eager (:mod:`thunder_ext.python_state.interpreter_state`): grad-mode context
managers
are the interpreter's, grad mode follows the trace, tensor metadata reads as eager's — on every call, on each
executor, with gradients compared with eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ext
import thunder
from effects import interpreter_owned

from executor_configs import CALLS, CONFIGS, PARAMS, per_case


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _check(fn: Callable[..., Any], config: str, *make: Callable[[], torch.Tensor]) -> None:
    """``fn`` under ``thunder_ext.jit`` (``config``) against eager on identical inputs, ``CALLS`` times: the same
    outputs (values, ``requires_grad``, plain Python answers) and, where an output requires grad, the same
    gradients of the inputs after ``.backward()``."""
    jfn = thunder_ext.jit(fn, **CONFIGS[config])
    for _ in range(CALLS):
        base = [m() for m in make]
        eager_in = [b.detach().clone().requires_grad_(b.requires_grad) for b in base]
        jit_in = [b.detach().clone().requires_grad_(b.requires_grad) for b in base]
        expected, got = _flat(fn(*eager_in)), _flat(jfn(*jit_in))
        assert len(expected) == len(got)
        for e, g in zip(expected, got, strict=True):
            if isinstance(e, torch.Tensor):
                assert g.requires_grad == e.requires_grad
                torch.testing.assert_close(g, e)
            else:
                assert type(g) is type(e) and g == e
        loss_e = sum(e.sum() for e in expected if isinstance(e, torch.Tensor) and e.requires_grad)
        loss_g = sum(g.sum() for g in got if isinstance(g, torch.Tensor) and g.requires_grad)
        if isinstance(loss_e, torch.Tensor):
            loss_e.backward()
            loss_g.backward()
            for e, g in zip(eager_in, jit_in, strict=True):
                torch.testing.assert_close(g.grad, e.grad)


def _leaf() -> torch.Tensor:
    return torch.randn(4, requires_grad=True)


# --- A: context managers belong to the interpreter -------------------------------------------------------------
def nested_no_grad_enable_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        z = x * 3
    return y, z, y + z


def nested_enable_grad_no_grad(x):
    with torch.enable_grad():
        with torch.no_grad():
            y = x * 3
        z = x * 4
    return x * 2 + y + z


@torch.enable_grad()
def decorated_enable_grad(x):
    return x.sin() + 1


@torch.no_grad()
def decorated_no_grad(x):
    return x * 2


def set_grad_enabled_off_on(x):
    with torch.set_grad_enabled(False):
        y = x * 2
        with torch.set_grad_enabled(True):
            z = x.cos()
        w = x * 5
    return y, z, w


def inside_inference_mode(x):
    with torch.inference_mode():
        y = x * 2
    return y, x * 3


def autocast_bf16(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x.t()
    return y.float() + x.sum(), y.dtype == torch.bfloat16


CONTEXT_PROGRAMS = [nested_no_grad_enable_grad, nested_enable_grad_no_grad, decorated_enable_grad, decorated_no_grad,
                    set_grad_enabled_off_on, inside_inference_mode]


@pytest.mark.parametrize("fn,config", per_case(CONTEXT_PROGRAMS, [f.__name__ for f in CONTEXT_PROGRAMS]))
def test_context_managers(fn: Callable[..., Any], config: str) -> None:
    _check(fn, config, _leaf)


@pytest.mark.parametrize("config", ["torch", pytest.param("torchcompile-dataflow", marks=pytest.mark.slow)])
def test_autocast_cpu_bf16(config: str) -> None:
    _check(autocast_bf16, config, lambda: torch.randn(4, 4, requires_grad=True))


def test_context_manager_policy_is_one_named_set() -> None:
    assert all(interpreter_owned(cm) for cm in (torch.no_grad(), torch.enable_grad(), torch.set_grad_enabled(True),
                                                torch.inference_mode(), torch.autocast("cpu")))
    assert not interpreter_owned(torch.nn.Linear(1, 1))


def test_stock_thunder_differentiates_the_rest_of_a_no_grad_block_after_enable_grad() -> None:
    """The contrast: stock ``thunder.jit`` asks the process's grad mode, so ``enable_grad`` restores it *on*."""
    x = torch.randn(4, requires_grad=True)
    _, z, _ = thunder.jit(nested_no_grad_enable_grad)(x)
    assert z.requires_grad and not nested_no_grad_enable_grad(x)[1].requires_grad


# --- B: tensor metadata as eager answers it --------------------------------------------------------------------
def requires_grad_answers(w):
    h = w * 1.0
    with torch.no_grad():
        n = w * 2
        with torch.enable_grad():
            e = w * 3
    return h.requires_grad, w.detach().requires_grad, n.requires_grad, e.requires_grad, \
        torch.zeros_like(w).requires_grad, (w > 0).requires_grad, h * 2


def hook_on_intermediate(w):
    h = w * 1.0
    if h.requires_grad:
        h.register_hook(lambda g: g * 3)
    return (h * h).sum()


def dtype_answers(w, i):
    return (i.dtype == torch.long, i.dtype in (torch.long, torch.int), i.dtype != torch.long,
            w.dtype == torch.float32, w.dtype is torch.float32, w.dtype in {torch.float16, torch.bfloat16},
            str(w.dtype), w.to(i.dtype).dtype == torch.int64, w * 2)


def dtype_picks_the_loss(logits, labels):
    if labels.dtype == torch.long or labels.dtype == torch.int:
        return torch.nn.functional.cross_entropy(logits, labels)
    return torch.nn.functional.mse_loss(logits.sum(-1), labels.float())


def leaf_answers(w, x):
    h = w * 2
    return (w.is_leaf, x.is_leaf, h.is_leaf, w.detach().is_leaf, w.grad_fn is None, h.grad_fn is None,
            x.grad_fn is None, h + x)


def device_layout_answers(w):
    return (w.device == torch.device("cpu"), w.device == "cpu", w.device.type == "cpu", str(w.device),
            w.layout == torch.strided, torch.zeros(2, device=w.device).device == w.device,
            w.device != torch.device("mps:0"), w + 1)  # a device Thunder cannot run on (GradScaler.unscale_)


@pytest.mark.parametrize("config", PARAMS)
def test_requires_grad_follows_eager(config: str) -> None:
    _check(requires_grad_answers, config, _leaf)


@pytest.mark.parametrize("config", PARAMS)
def test_register_hook_on_intermediate(config: str) -> None:
    _check(hook_on_intermediate, config, _leaf)


@pytest.mark.parametrize("config", PARAMS)
def test_dtype_compares_with_torch_dtypes(config: str) -> None:
    _check(dtype_answers, config, _leaf, lambda: torch.arange(4))
    _check(dtype_picks_the_loss, config, lambda: torch.randn(3, 5, requires_grad=True),
           lambda: torch.tensor([0, 4, 2]))


@pytest.mark.parametrize("config", PARAMS)
def test_is_leaf_and_grad_fn(config: str) -> None:
    _check(leaf_answers, config, _leaf, lambda: torch.randn(4))


@pytest.mark.parametrize("config", PARAMS)
def test_device_and_layout(config: str) -> None:
    _check(device_layout_answers, config, _leaf)


def test_is_leaf_of_an_argument_is_checked_on_every_call() -> None:
    """An entry compiled for a leaf argument does not answer for a non-leaf one (it compiles again)."""
    jfn = thunder_ext.jit(lambda w: (w * 2, w.is_leaf, w.grad_fn is None))
    leaf = torch.randn(3, requires_grad=True)
    assert jfn(leaf)[1:] == (True, True)
    assert jfn(leaf)[1:] == (True, True)
    assert jfn(leaf * 1)[1:] == (False, False)
    assert thunder.cache_misses(jfn) == 2


def test_grad_fn_of_a_traced_tensor_answers_only_its_identity() -> None:
    jfn = thunder_ext.jit(lambda w: (w * 2).grad_fn.name())
    with pytest.raises(Exception, match="only `grad_fn is None`"):
        jfn(torch.randn(3, requires_grad=True))


def test_stock_thunder_answers_thunder_metadata() -> None:
    """The contrast: stock ``thunder.jit`` answers an intermediate's ``requires_grad`` and a dtype comparison
    unlike eager."""
    w, i = torch.randn(4, requires_grad=True), torch.arange(4)
    out = thunder.jit(dtype_answers)(w, i)
    assert out[0] is False and dtype_answers(w, i)[0] is True
    assert thunder.jit(requires_grad_answers)(w)[0] is False


# --- C: index_put's backward is fixed in place ----------------------------------------------------------------
def index_put_values(x, v):
    return x.index_put((torch.tensor([0, 2]),), v * 2) * x


@pytest.mark.parametrize("config", ["torch", pytest.param("torchcompile-dataflow", marks=pytest.mark.slow)])
def test_index_put_gradients(config: str) -> None:
    _check(index_put_values, config, _leaf, lambda: torch.randn(2, requires_grad=True))


def test_no_symbol_has_two_backward_rules() -> None:
    """Thunder's own ``test_no_duplicate_backward_registered`` with the patches held: a grad-table rule that joins a
    symbol's forward/backward pair (auto-registered ops, ``flat_joint``) takes the pair's place."""
    from thunder.core.transforms import _grad_fn_map, backward_impls

    with thunder_ext.host.patches.holding():
        assert not set(_grad_fn_map) & set(backward_impls)
        assert _grad_fn_map["torch.lstm"].joins[1] is not None  # the LSTM's rule is its own pair, joined
