"""Four in-place PyTorch models that check themselves against eager execution.

Each model is described by a :class:`Model`: a name, a one-line description and a ``build(size, device, seed)``
function returning a fresh :class:`Instance` — the callable to compile (a function or an ``nn.Module``), its
positional arguments, and a :meth:`Instance.state` view naming every tensor the call may mutate (all tensor
arguments, flattened through lists, plus the module's parameters and buffers). Building twice with the same seed
gives bit-identical instances, so :func:`check` can run eager on one and a compiler on the other and compare the
returned values *and* all mutated state.

The models:

* ``cnn_bn`` — ``Conv2d → BatchNorm2d (training mode) → ReLU(inplace=True)``, twice. BatchNorm writes its
  running mean/var and ``num_batches_tracked`` buffers inside a composite op.
* ``kv_decoder`` — a one-layer attention decoder whose decode loop writes the key cache with ``index_copy_`` and
  the value cache with slice assignment, then attends over the filled prefix.
* ``adam`` — an Adam step over a list of parameters written with ``mul_``/``add_``/``addcmul_``/``addcdiv_``,
  mutating parameters and both moment buffers.
* ``residual_mlp`` — a residual MLP whose hidden activations are updated with ``add_``/``relu_`` (in-place ops on
  intermediates only; the arguments are not mutated).

Sizes are named (:data:`SIZES`); ``tiny`` is for tests, ``small`` is the demo default, ``medium``/``large`` for
benchmarks on a GPU. Parameters do not require grad: the models measure forward execution of in-place code.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "MODELS",
    "SIZES",
    "CheckResult",
    "Instance",
    "Mismatch",
    "Model",
    "Size",
    "check",
    "compare",
    "exact_float32",
    "get_model",
    "model_names",
    "verify",
]


@dataclass(frozen=True, slots=True)
class Size:
    """Dimensions shared by the four models (each uses the fields it needs)."""

    name: str
    batch: int
    channels: int  # CNN channels
    image: int  # CNN image side
    dim: int  # decoder / MLP width
    cache_len: int  # KV cache capacity
    prompt: int  # cache positions already filled before decoding
    steps: int  # decode steps per call
    layers: int  # residual MLP blocks
    adam_params: int  # tensors in the Adam step
    adam_numel: int  # elements per Adam tensor


SIZES: dict[str, Size] = {
    s.name: s
    for s in (
        Size("tiny", batch=2, channels=4, image=8, dim=16, cache_len=12, prompt=4, steps=3, layers=2,
             adam_params=3, adam_numel=64),
        Size("small", batch=4, channels=16, image=16, dim=64, cache_len=32, prompt=8, steps=4, layers=4,
             adam_params=4, adam_numel=64 * 1024),
        Size("medium", batch=16, channels=32, image=32, dim=256, cache_len=128, prompt=32, steps=8, layers=8,
             adam_params=8, adam_numel=1024 * 1024),
        Size("large", batch=32, channels=64, image=64, dim=1024, cache_len=512, prompt=128, steps=8, layers=8,
             adam_params=4, adam_numel=32 * 1024 * 1024),
    )
}


@dataclass(frozen=True, slots=True)
class Instance:
    """A callable with its arguments; :meth:`state` names every tensor the call may write."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def state(self) -> dict[str, torch.Tensor]:
        """Every tensor argument (lists flattened, ``arg1[2]``) and, for modules, the state dict entries."""
        named: dict[str, torch.Tensor] = {}
        for i, arg in enumerate(self.args):
            for suffix, t in _tensors(arg):
                named[f"arg{i}{suffix}"] = t
        if isinstance(self.fn, nn.Module):
            for key, t in self.fn.state_dict(keep_vars=True).items():
                named[f"module.{key}"] = t
        return named


def _tensors(value: Any, suffix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield suffix, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{suffix}[{i}]")


@dataclass(frozen=True, slots=True)
class Model:
    """A named model: ``build(size, device, seed)`` returns a fresh, deterministic :class:`Instance`."""

    name: str
    description: str
    build: Callable[[Size, torch.device, int], Instance]
    rtol: float = 1e-4
    atol: float = 1e-5


# --------------------------------------------------------------------------------------------------- cnn_bn


class ConvBNBlock(nn.Module):
    """Two ``conv → batchnorm (training) → relu_`` stages; BatchNorm updates its running statistics."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.stem(x)), inplace=True)
        y = self.bn2(self.conv(h))
        return y.add_(h).relu_()


def build_cnn_bn(size: Size, device: torch.device, seed: int) -> Instance:
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        block = ConvBNBlock(size.channels).train().requires_grad_(False).to(device)
    x = torch.randn(size.batch, 3, size.image, size.image, generator=gen).to(device)
    return Instance(block, (x,))


# ----------------------------------------------------------------------------------------------- kv_decoder


def kv_decode(
    x: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    positions: torch.Tensor,
    prompt: int,
    wq: torch.Tensor,
    wk: torch.Tensor,
    wv: torch.Tensor,
    wo: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
) -> torch.Tensor:
    """Decode ``len(positions)`` tokens after a ``prompt``-long prefix; return the hidden states of every step.

    ``x`` is ``[batch, dim]`` (the last token's hidden state) and the caches are ``[batch, cache_len, dim]``.
    Step ``i`` writes slot ``positions[i]`` (which must equal ``prompt + i``) of the key cache with
    ``index_copy_`` and of the value cache with slice assignment, then attends over the filled prefix.
    """
    scale = 1.0 / math.sqrt(x.shape[-1])
    outputs = []
    for step in range(positions.shape[0]):
        filled = prompt + step + 1
        q = x @ wq
        k_cache.index_copy_(1, positions[step : step + 1], (x @ wk).unsqueeze(1))
        v_cache[:, filled - 1] = x @ wv
        scores = torch.softmax((k_cache[:, :filled] @ q.unsqueeze(-1)).squeeze(-1) * scale, dim=-1)
        attn = (scores.unsqueeze(1) @ v_cache[:, :filled]).squeeze(1)
        x = x + attn @ wo
        h = x @ w1
        h.relu_()
        x = x + h @ w2
        outputs.append(x)
    return torch.stack(outputs, dim=1)


def _weights(gen: torch.Generator, device: torch.device, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    return [(torch.randn(*shape, generator=gen) / math.sqrt(shape[0])).to(device) for shape in shapes]


def build_kv_decoder(size: Size, device: torch.device, seed: int) -> Instance:
    gen = torch.Generator().manual_seed(seed)
    b, d, n = size.batch, size.dim, size.cache_len
    x = torch.randn(b, d, generator=gen).to(device)
    k_cache = torch.zeros(b, n, d)
    v_cache = torch.zeros(b, n, d)
    k_cache[:, : size.prompt] = torch.randn(b, size.prompt, d, generator=gen)
    v_cache[:, : size.prompt] = torch.randn(b, size.prompt, d, generator=gen)
    positions = torch.arange(size.prompt, size.prompt + size.steps, device=device)
    weights = _weights(gen, device, (d, d), (d, d), (d, d), (d, d), (d, 4 * d), (4 * d, d))
    return Instance(kv_decode, (x, k_cache.to(device), v_cache.to(device), positions, size.prompt, *weights))


# ----------------------------------------------------------------------------------------------------- adam


@dataclass(frozen=True, slots=True)
class AdamStep:
    """One Adam step (``torch.optim.Adam``'s single-tensor algorithm) at a fixed step count, all in place."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    step: int = 10

    def __call__(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
    ) -> None:
        bias_correction1 = 1 - self.beta1**self.step
        bias_correction2_sqrt = math.sqrt(1 - self.beta2**self.step)
        step_size = self.lr / bias_correction1
        for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs, strict=True):
            m.mul_(self.beta1).add_(g, alpha=1 - self.beta1)
            v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
            p.addcdiv_(m, denom, value=-step_size)


def build_adam(size: Size, device: torch.device, seed: int) -> Instance:
    gen = torch.Generator().manual_seed(seed)

    def tensors(scale: float = 1.0, positive: bool = False) -> list[torch.Tensor]:
        out = [torch.randn(size.adam_numel, generator=gen) * scale for _ in range(size.adam_params)]
        return [(t.abs() if positive else t).to(device) for t in out]

    params, grads = tensors(), tensors()
    exp_avgs, exp_avg_sqs = tensors(0.1), tensors(0.01, positive=True)
    return Instance(AdamStep(), (params, grads, exp_avgs, exp_avg_sqs))


# --------------------------------------------------------------------------------------------- residual_mlp


def residual_mlp(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor]) -> torch.Tensor:
    """``layers`` residual blocks ``x = x + W2 relu(W1 x + b1) + b2``; activations are updated in place."""
    for i in range(0, len(weights), 2):
        h = x @ weights[i]
        h.add_(biases[i]).relu_()
        y = h @ weights[i + 1]
        y.add_(biases[i + 1]).add_(x)
        x = y
    return x


def build_residual_mlp(size: Size, device: torch.device, seed: int) -> Instance:
    gen = torch.Generator().manual_seed(seed)
    d = size.dim
    shapes = [shape for _ in range(size.layers) for shape in ((d, 4 * d), (4 * d, d))]
    weights = _weights(gen, device, *shapes)
    biases = [(torch.randn(shape[1], generator=gen) * 0.1).to(device) for shape in shapes]
    x = torch.randn(size.batch * 8, d, generator=gen).to(device)
    return Instance(residual_mlp, (x, weights, biases))


MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("cnn_bn", "Conv+BatchNorm(train)+relu_ block, running stats", build_cnn_bn),
        Model("kv_decoder", "decoder, KV cache via index_copy_/slice assignment", build_kv_decoder, rtol=1e-4,
              atol=1e-4),
        Model("adam", "Adam step over a list of params (mul_/add_/addcmul_/addcdiv_)", build_adam),
        Model("residual_mlp", "residual MLP with add_/relu_ on activations", build_residual_mlp),
    )
}


def model_names() -> tuple[str, ...]:
    return tuple(MODELS)


def get_model(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}") from None


# ---------------------------------------------------------------------------------------------- self-check


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One output or state tensor that differs from eager (``max_abs_err`` is inf for shape/dtype changes)."""

    name: str
    max_abs_err: float
    detail: str


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Outcome of comparing a compiled model with eager: outputs and every mutated tensor."""

    model: str
    compared: int  # tensors compared (outputs + state)
    mutated: tuple[str, ...]  # state tensors eager changed
    mismatches: tuple[Mismatch, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def summary(self) -> str:
        if self.ok:
            return f"ok ({self.compared} tensors incl. {len(self.mutated)} mutated state)"
        worst = ", ".join(f"{m.name} ({m.detail})" for m in self.mismatches[:3])
        more = f" and {len(self.mismatches) - 3} more" if len(self.mismatches) > 3 else ""
        return f"MISMATCH in {worst}{more}"


def compare(
    expected: Any, actual: Any, rtol: float, atol: float, prefix: str = "output"
) -> tuple[int, list[Mismatch]]:
    """Compare two (nested list/tuple of) tensors or values; return (tensors compared, mismatches).

    ``atol`` is relative to the tensor's scale (its largest magnitude, at least 1): a deep model's outputs reach
    hundreds, where reordered float32 sums differ by more than an absolute ``atol`` in their smallest elements."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return 1, [Mismatch(prefix, math.inf, f"expected a tensor, got {type(actual).__name__}")]
        if expected.shape != actual.shape or expected.dtype != actual.dtype:
            detail = f"expected {expected.dtype}{list(expected.shape)}, got {actual.dtype}{list(actual.shape)}"
            return 1, [Mismatch(prefix, math.inf, detail)]
        scale = max(1.0, expected.abs().max().item()) if expected.is_floating_point() and expected.numel() else 1.0
        if torch.allclose(actual, expected, rtol=rtol, atol=atol * scale, equal_nan=True):
            return 1, []
        err = (actual.double() - expected.double()).abs().max().item()
        return 1, [Mismatch(prefix, err, f"max abs err {err:.3g}")]
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            return 1, [Mismatch(prefix, math.inf, f"expected a sequence of {len(expected)}, got {actual!r:.60}")]
        total = 0
        found: list[Mismatch] = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            n, m = compare(e, a, rtol, atol, f"{prefix}[{i}]")
            total, found = total + n, found + m
        return total, found
    if isinstance(actual, torch.Tensor) or expected != actual:  # a tensor where eager has a value: not equal
        return 0, [Mismatch(prefix, math.inf, f"expected {expected!r:.40}, got {actual!r:.40}")]
    return 0, []


def verify(model: Model, eager: Instance, compiled: Instance, outputs: Sequence[Any]) -> CheckResult:
    """Compare ``outputs`` (of ``len(outputs)`` compiled calls already made on ``compiled``) and the state of
    ``compiled`` with as many eager calls on ``eager`` (an untouched instance built with the same seed)."""
    before = {k: t.clone() for k, t in eager.state().items()}
    total = 0
    mismatches: list[Mismatch] = []
    for call, actual in enumerate(outputs):
        n, m = compare(eager.fn(*eager.args), actual, model.rtol, model.atol, f"call{call}.output")
        total, mismatches = total + n, mismatches + m
    expected_state, actual_state = eager.state(), compiled.state()
    for key, t in expected_state.items():
        n, m = compare(t, actual_state.get(key), model.rtol, model.atol, f"state.{key}")
        total, mismatches = total + n, mismatches + m
    mutated = tuple(k for k, t in expected_state.items() if not torch.equal(before[k], t))
    return CheckResult(model.name, total, mutated, tuple(mismatches))


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """TF32 off for CUDA convolutions and matrix products while the block runs (the settings restored after).

    With TF32 (cuDNN's default for convolutions), eager and a compiler that picks another algorithm or layout for
    the same convolution round differently, by ~1e-3: every compiler then "mismatches" eager for reasons that have
    nothing to do with effects. A check compares what a compiler computes, so it computes in full float32."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def check(
    model: Model,
    compile_fn: Callable[[Callable[..., Any]], Callable[..., Any]],
    size: Size | str = "tiny",
    device: torch.device | str = "cpu",
    seed: int = 0,
    calls: int = 2,
) -> CheckResult:
    """Run ``calls`` calls eagerly and through ``compile_fn(fn)`` on identical instances; compare everything.

    Several calls matter: in-place state feeds the next call, compiled callables take a different (cached) path
    from the second call on, and an output must not be overwritten by a later call.
    """
    size = SIZES[size] if isinstance(size, str) else size
    device = torch.device(device)
    eager, compiled = model.build(size, device, seed), model.build(size, device, seed)
    with exact_float32():
        compiled_fn = compile_fn(compiled.fn)
        outputs = [compiled_fn(*compiled.args) for _ in range(calls)]
        return verify(model, eager, compiled, outputs)
