"""In-place training patterns for the gradient matrix: each case builds fresh inputs (some requiring grad) and a
function or module; :func:`check_case` runs it eagerly and through a jitted callable, twice (first call and cache
hit), and compares outputs, inputs after the call, every ``.grad`` and every buffer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]
    """Fresh ``(function or module, arguments)``; the same seed every time."""
    calls: int = 2
    """Calls on the same arguments (the second is a cache hit). One where the function gives an argument an
    autograd history: a second call would backpropagate into the first call's graph, which eager refuses too."""
    torchcompile_issue: str | None = None
    """A known failure under the torch.compile executor (the case is an expected failure there, strictly)."""


def _g(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def _fn(f: Callable[..., Any], *makers: Callable[[], torch.Tensor]) -> Callable[[], tuple[Any, tuple[Any, ...]]]:
    def make() -> tuple[Any, tuple[Any, ...]]:
        torch.manual_seed(0)
        return f, tuple(m() for m in makers)

    return make


def _module(build: Callable[[], nn.Module],
            *makers: Callable[[], torch.Tensor]) -> Callable[[], tuple[Any, tuple[Any, ...]]]:
    def make() -> tuple[Any, tuple[Any, ...]]:
        torch.manual_seed(0)
        module = build()
        return module, tuple(m() for m in makers)

    return make


W = lambda: _g(4, 3)  # noqa: E731
X = lambda: torch.randn(4, 3)  # noqa: E731
A = lambda: _g(4, 5)  # noqa: E731
M = lambda: _g(5, 3)  # noqa: E731
V = lambda: _g(3)  # noqa: E731
IDX = lambda: torch.tensor([2, 0])  # noqa: E731


def relu_on_matmul(a, w):
    h = a @ w
    h.relu_()
    return h.sum()


def chain(x, w):
    y = x * w
    y.mul_(2).add_(1).relu_()
    return (y * y).sum()


def sigmoid_saved(x, w):
    y = x * w
    y.sigmoid_()
    return (y * 3).sum()


def tanh_then_two_uses(x, w):
    y = x * w
    y.tanh_()
    return y.sum() + (y * y).sum()


def exp_then_scale(x, w):
    y = x * w
    y.exp_()
    return (y * 2).mean()


def slice_write(x, w):
    y = x * w
    y[1:3].mul_(2)
    return (y * y).sum()


def select_zero(x, w):
    y = x * w
    y[:, 0].zero_()
    return (y * w).sum()


def transpose_write(x, w):
    y = x * w
    z = y.t()
    z.add_(1)
    return (y * y).sum()


def setitem_tensor(x, w, v):
    y = x * w
    y[1:3] = v
    return (y * y).sum()


def setitem_scalar(x, w):
    y = x * w
    y[0] = 0.5
    return (y * y).sum()


def index_copy(x, w, idx):
    y = x * w
    y.index_copy_(0, idx, w[:2] * 3)
    return (y * y).sum()


def scatter_write(x, w):
    y = x * w
    index = torch.tensor([[0, 1, 2], [2, 0, 1]])
    y.scatter_(1, index, w[:2])
    return (y * y).sum()


def masked_fill(x, w):
    y = x * w
    y.masked_fill_(y > 0, 0.0)
    return (y * w).sum()


def clamp_(x, w):
    y = x * w
    y.clamp_(-0.5, 0.5)
    return (y * y).sum()


def view_then_base(x, w):
    y = x * w
    v = y.view(-1)
    v.mul_(2)
    return y.sum() + (v * v).sum()


def base_then_view(x, w):
    y = x * w
    v = y[0]
    y.mul_(2)
    return (v * v).sum() + y.sum()


def nested_view(x, w):
    y = x * w
    y[1:].t()[0].add_(1.5)
    return (y * y).sum()


def unsqueeze_write(x, w):
    y = x * w
    y.unsqueeze(0).mul_(3)
    return (y * w).sum()


def reshape_write(x, w):
    y = x * w
    y.reshape(-1).add_(1)
    return (y * y).sum()


def returned_view(x, w):
    y = x * w
    z = y.relu_()
    return z[0]


def returned_mutated(x, w):
    y = x * w
    y.relu_()
    return y


def two_views(x, w):
    y = x * w
    a, b = y[:2], y[2:]
    a.add_(b)
    b.mul_(3)
    return (y * y).sum()


def narrow_write(x, w):
    y = x * w
    y.narrow(0, 1, 2).mul_(2)
    y.narrow(1, 0, 1).sub_(1)
    return (y * y).sum()


def copy_into_row(x, w, v):
    y = x * w
    y[0].copy_(v)
    return (y * y).sum()


def fill_column(x, w):
    y = x * w
    y[:, 1].fill_(3.0)
    return (y * w).sum()


def addcmul(x, w):
    y = x * w
    y.addcmul_(w, w, value=0.5)
    return (y * y).sum()


def mul_by_grad(x, w, v):
    y = x * w
    y.mul_(v)
    return (y * y).sum()


def div_by_grad(x, w):
    y = x * w
    y.div_(w * w + 1)
    return (y * y).sum()


def copy_whole(x, w):
    y = x * w
    y.copy_(w.t().t() * 2)
    return (y * x).sum()


def pow_(x, w):
    y = x * w
    y.pow_(2)
    return y.sum()


def softmax_after(x, w):
    y = x * w
    y.add_(1)
    return torch.softmax(y, dim=-1).pow(2).sum()


def sub_alpha(x, w):
    y = x * w
    y.sub_(w, alpha=0.5)
    return (y * y).sum()


def buffer_gets_grad(x, w, buf):
    buf.add_((x * w).sum(0))  # buf does not require grad; its new value does
    return buf.sum() * 2


def buffer_no_grad_value(x, w, buf):
    buf.add_(1)
    return (x * w * buf).sum()


def no_grad_param_update(w, x):
    with torch.no_grad():
        w.mul_(0.5)
    return (w * x).sum()


def foreach_no_grad_param_update(w, x):
    """An output-less in-place op (``_foreach_add_``: nothing to read by name) updates a parameter under no_grad,
    as ``torch.optim`` does; the forward must run it although no output needs it."""
    with torch.no_grad():
        torch._foreach_add_([w], [x], alpha=-0.1)
    return (w * x).sum()


def foreach_buffer_ema(w, x, buf):
    """Output-less in-place ops on a buffer (no grad anywhere near it) next to a loss that requires grad."""
    with torch.no_grad():
        torch._foreach_mul_([buf], 0.9)
        torch._foreach_add_([buf], [x], alpha=0.1)
    return (w * x).sum()


def buffer_chain_detached(w, x, buf):
    buf.mul_(0.9).add_(x.detach())
    return (w * x).sum()


def no_grad_intermediate(x, w):
    y = x * w
    with torch.no_grad():
        y.clamp_(-0.2, 0.2)
    return (y * 2).sum()


def no_grad_slice(x, w):
    y = x * w
    with torch.no_grad():
        y[0].zero_()
    return (y * y).sum()


def kv_cache(q, k, cache):
    cache.index_copy_(0, torch.tensor([1, 2]), k)
    return (q @ cache.t()).softmax(-1).sum()


def mutate_then_return_input(x, w, buf):
    buf.mul_(2)
    return buf, (x * w).sum()


def dropout_p0(x, w):
    y = x * w
    F.dropout(y, p=0.0, training=True, inplace=True)
    return (y * y).sum()


def aliased_update(a, b, w):
    a.add_(w.detach().sum(0))  # writes storage that b shares
    return (b * w).sum()


def _aliased(view: Callable[[torch.Tensor], torch.Tensor],
             fn: Callable[..., Any] = aliased_update) -> Callable[[], tuple[Any, tuple[Any, ...]]]:
    def make() -> tuple[Any, tuple[Any, ...]]:
        torch.manual_seed(0)
        x = torch.randn(3, 3)
        return fn, (x, view(x), _g(3, 3))

    return make


def aliased_slices(a, b, w):
    b.mul_(w[0, :].detach())  # b = x[1:], a = x[:2]: they share row 1
    return (a * w[:2]).sum() + b.sum()


def _aliased_slices() -> tuple[Any, tuple[Any, ...]]:
    torch.manual_seed(0)
    x = torch.randn(3, 3)
    return aliased_slices, (x[:2], x[1:], _g(3, 3))


def aliased_write_backs_only(a, b, w):
    b.mul_(w)  # a and b share storage: their write-backs are all the forward does (no output reads them)
    a.mul_(w)
    return ()


def scale_by_reduction(x, w):
    h = x * w
    h.mul_(w.sum())  # a 0-dim intermediate times a matrix: its gradient must be summed (Thunder's rules do not)
    return h.sum()


def plain_arg_takes_grad(b, w):
    b.mul_(w)  # b does not require grad; its write-back does (autograd, in the epilogue); w's gradient needs old b
    return b


def _mlp_inplace() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(inplace=True), nn.Linear(8, 8), nn.LeakyReLU(0.1, inplace=True),
                         nn.Linear(8, 2))


def _hardtanh_inplace() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 6), nn.Hardtanh(inplace=True), nn.Linear(6, 2), nn.ELU(inplace=True))


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 3)
        self.fc2 = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc1(x)
        out.relu_()
        out = self.fc2(out)
        out += x
        return F.relu(out, inplace=True).sum()


class _AttentionResidual(nn.Module):
    """``nn.MultiheadAttention`` (Thunder runs ``F.multi_head_attention_forward`` as an auto-registered torch call)
    with the residual added in place to its output."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attention(x, x, x)
        out.add_(x)
        return out


class _ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x))).mean()


class _BN1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 5)
        self.bn = nn.BatchNorm1d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn(self.fc(x))
        h.relu_()
        return h.pow(2).sum()


class _Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("ema", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        h = self.fc(x)
        with torch.no_grad():
            self.ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
        return h.sum() * self.steps


def _image() -> torch.Tensor:
    return torch.randn(2, 2, 5, 5)


CASES: tuple[Case, ...] = (
    Case("relu_on_matmul", _fn(relu_on_matmul, A, M)),
    Case("chain", _fn(chain, X, W)),
    Case("sigmoid_saved", _fn(sigmoid_saved, X, W)),
    Case("tanh_then_two_uses", _fn(tanh_then_two_uses, X, W)),
    Case("exp_then_scale", _fn(exp_then_scale, X, W)),
    Case("slice_write", _fn(slice_write, X, W)),
    Case("select_zero", _fn(select_zero, X, W)),
    Case("transpose_write", _fn(transpose_write, X, W)),
    Case("setitem_tensor", _fn(setitem_tensor, X, W, V)),
    Case("setitem_scalar", _fn(setitem_scalar, X, W)),
    Case("index_copy", _fn(index_copy, X, W, IDX)),
    Case("scatter_write", _fn(scatter_write, X, W)),
    Case("masked_fill", _fn(masked_fill, X, W)),
    Case("clamp_", _fn(clamp_, X, W)),
    Case("view_then_base", _fn(view_then_base, X, W)),
    Case("base_then_view", _fn(base_then_view, X, W)),
    Case("nested_view", _fn(nested_view, X, W)),
    Case("unsqueeze_write", _fn(unsqueeze_write, X, W)),
    Case("reshape_write", _fn(reshape_write, X, W)),
    Case("returned_view", _fn(returned_view, X, W)),
    Case("returned_mutated", _fn(returned_mutated, X, W)),
    Case("two_views", _fn(two_views, X, W)),
    Case("narrow_write", _fn(narrow_write, X, W)),
    Case("copy_into_row", _fn(copy_into_row, X, W, V)),
    Case("fill_column", _fn(fill_column, X, W)),
    Case("addcmul", _fn(addcmul, X, W)),
    Case("mul_by_grad", _fn(mul_by_grad, X, W, V)),
    Case("div_by_grad", _fn(div_by_grad, X, W)),
    Case("copy_whole", _fn(copy_whole, X, W)),
    Case("pow_", _fn(pow_, X, W)),
    Case("softmax_after", _fn(softmax_after, X, W)),
    Case("sub_alpha", _fn(sub_alpha, X, W)),
    Case("buffer_gets_grad", _fn(buffer_gets_grad, X, W, lambda: torch.zeros(3)), calls=1),
    Case("buffer_no_grad_value", _fn(buffer_no_grad_value, X, W, lambda: torch.zeros(3))),
    Case("no_grad_param_update", _fn(no_grad_param_update, W, X)),
    Case("foreach_no_grad_param_update", _fn(foreach_no_grad_param_update, W, X)),
    Case("foreach_buffer_ema", _fn(foreach_buffer_ema, W, X, lambda: torch.ones(4, 3))),
    Case("buffer_chain_detached", _fn(buffer_chain_detached, W, lambda: _g(4, 3), lambda: torch.ones(4, 3))),
    Case("no_grad_intermediate", _fn(no_grad_intermediate, X, W)),
    Case("no_grad_slice", _fn(no_grad_slice, X, W)),
    Case("kv_cache", _fn(kv_cache, lambda: _g(2, 3), lambda: _g(2, 3), lambda: torch.zeros(4, 3)), calls=1),
    Case("mutate_then_return_input", _fn(mutate_then_return_input, X, W, lambda: torch.ones(3))),
    Case("dropout_p0", _fn(dropout_p0, X, W)),
    Case("aliased_write_backs_only", _aliased(lambda x: x, aliased_write_backs_only), calls=1),
    Case("plain_arg_takes_grad", _fn(plain_arg_takes_grad, X, W), calls=1),
    Case("scale_by_reduction", _fn(scale_by_reduction, X, W)),
    Case("aliased_same_tensor", _aliased(lambda x: x)),
    Case("aliased_transpose", _aliased(lambda x: x.t())),
    Case("aliased_flat_view", _aliased(lambda x: x.view(9)[:9].view(3, 3))),
    Case("aliased_partial_slices", _aliased_slices),
    Case("mlp_inplace_activations", _module(_mlp_inplace, lambda: torch.randn(4, 3))),
    Case("hardtanh_elu_inplace", _module(_hardtanh_inplace, lambda: torch.randn(4, 3))),
    Case("residual_inplace_add", _module(_Residual, lambda: torch.randn(4, 3))),
    Case("attention_output_add_", _module(_AttentionResidual, lambda: torch.randn(2, 3, 8)),
         torchcompile_issue="KeyError while torch.compile builds a backward region (a transpose whose subsymbols name "
                            "a proxy the region does not have), with or without the in-place add"),
    Case("conv_batchnorm_train", _module(_ConvBN, _image)),
    Case("batchnorm1d_relu_", _module(_BN1d, lambda: torch.randn(6, 3))),
    Case("module_buffers_counter_ema", _module(_Counter, lambda: torch.randn(4, 3))),
)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _state(callable_: Any, args: tuple[Any, ...]) -> list[tuple[str, torch.Tensor | None]]:
    """Everything observable after a call: inputs, their grads, module parameters, grads and buffers."""
    found: list[tuple[str, torch.Tensor | None]] = []
    for k, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            found.append((f"arg{k}", a.detach().clone()))
            grad = a.grad if a.is_leaf else None  # a view argument has no .grad of its own (torch warns)
            found.append((f"arg{k}.grad", None if grad is None else grad.clone()))
    if isinstance(callable_, nn.Module):
        for name, p in callable_.named_parameters():
            found.append((name, p.detach().clone()))
            found.append((f"{name}.grad", None if p.grad is None else p.grad.clone()))
        for name, b in callable_.named_buffers():
            found.append((f"buffer {name}", b.clone()))
    return found


def run(case: Case, jit: Callable[[Any], Any] | None) -> tuple[list[Any], list[Any]]:
    """Outputs of every call and the observable state after each (``jit=None``: eager)."""
    fn, args = case.make()
    target = fn if jit is None else jit(fn)
    outputs, states = [], []
    for _ in range(case.calls):
        out = target(*args)
        loss = sum(t.sum() for t in _tensors(out) if t.requires_grad)
        if isinstance(loss, torch.Tensor):
            loss.backward()
        outputs.append([t.detach().clone() for t in _tensors(out)])
        states.append(_state(fn, args))
    return outputs, states


def mismatches(case: Case, jit: Callable[[Any], Any], *, atol: float = 1e-4, rtol: float = 1e-4) -> list[str]:
    """What differs between eager and ``jit`` on ``case`` (empty: everything matches). Where eager raises, the
    jitted call must raise the same exception type."""
    try:
        eo, es = run(case, None)
    except Exception as expected:  # noqa: BLE001 - compared with what the jitted call raises
        try:
            run(case, jit)
        except type(expected):
            return []
        except Exception as other:  # noqa: BLE001
            return [f"raised {type(other).__name__}: {other}; eager raised {type(expected).__name__}"]
        return [f"eager raised {type(expected).__name__}: {expected}; the jitted call did not"]
    jo, js = run(case, jit)
    found = []
    for call, (e_out, j_out, e_state, j_state) in enumerate(zip(eo, jo, es, js, strict=True)):
        if len(e_out) != len(j_out):
            found.append(f"call {call}: {len(j_out)} outputs, eager {len(e_out)}")
        for k, (e, j) in enumerate(zip(e_out, j_out, strict=False)):
            if e.shape != j.shape or not torch.allclose(e, j, atol=atol, rtol=rtol):
                found.append(f"call {call}: output {k} differs (max |diff| {_diff(e, j)})")
        for (name, e), (_, j) in zip(e_state, j_state, strict=True):
            if (e is None) != (j is None):
                found.append(f"call {call}: {name} is {'None' if j is None else 'set'} "
                             f"(eager: {'None' if e is None else 'set'})")
            elif e is not None and (e.shape != j.shape or not torch.allclose(e, j, atol=atol, rtol=rtol)):
                found.append(f"call {call}: {name} differs (max |diff| {_diff(e, j)})")
    return found


def _diff(e: torch.Tensor, j: torch.Tensor) -> str:
    if e.shape != j.shape:
        return f"shapes {tuple(e.shape)} vs {tuple(j.shape)}"
    return f"{(e.double() - j.double()).abs().max().item():.3g}"
