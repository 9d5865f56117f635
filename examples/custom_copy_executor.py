"""A vendor executor that claims copy-like ops with its own kernels, declares their effects, and is checked.

Thunder executors can claim ``prims.copy_`` or ``index_copy_`` today, but cannot say that their kernel writes an
argument, so the write can be deleted or reordered. Here the executor declares the effects where it registers the
kernels (``effects=`` takes a schema string, an ``effects.Effects`` or operand lists by name), the claim is
checked against the symbol it implements, ``check_executor`` runs the kernels on samples to make sure the
declarations are true, and a KV-cache decode step runs through ``thunder_ext.jit`` with the ``torchcompile``
executor (both fusion types), matching eager: returned values and every mutated argument. A last run without
``torchcompile`` shows the ``prims.copy_`` claim at work (the in-place ``mul_`` decomposes into ``mul`` + ``copy_``).

Run: ``python examples/custom_copy_executor.py``.
"""

from __future__ import annotations

from collections import Counter

import thunder_ext  # applies the compat shim and imports thunder: import before thunder

import thunder
import thunder.torch as ltorch
import torch
from effects import Sample
from thunder.core import prims

calls: Counter[str] = Counter()


def vendor_copy(copy_from: torch.Tensor, copy_to: torch.Tensor, *, grad_enabled: bool) -> torch.Tensor:
    calls["prims.copy_"] += 1
    return copy_to.copy_(copy_from)


def vendor_tensor_copy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    calls["Tensor.copy_"] += 1
    return a.copy_(b)


def vendor_index_copy(a: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    calls["Tensor.index_copy_"] += 1
    return a.index_copy_(dim, index, source)


ex = thunder_ext.OperatorExecutor("vendor_copies")
copy_op = ex.register_operator("vendor_copy_", like=prims.copy_, fn=vendor_copy)
ex.register_implementation(prims.copy_, copy_op, effects="vendor_copy_(Tensor copy_from, Tensor(a!) copy_to, *, "
                                                         "bool grad_enabled) -> Tensor(a)")
tensor_copy_op = ex.register_operator("vendor_tensor_copy_", like=ltorch.copy_, fn=vendor_tensor_copy)
ex.register_implementation(ltorch.copy_, tensor_copy_op, effects={"read_writes": ["a"], "aliases": [(0, "a")]})
index_copy_op = ex.register_operator("vendor_index_copy_", like=ltorch.index_copy_, fn=vendor_index_copy)
ex.register_implementation(ltorch.index_copy_, index_copy_op, effects={"read_writes": ["a"], "aliases": [(0, "a")]})

# A claim that drops the write it implements is refused when it is declared, not discovered in production.
try:
    thunder_ext.declare_effects(ex, prims.copy_, reads=["copy_from", "copy_to"], aliases=[(0, "copy_to")])
except thunder_ext.DroppedEffectError as error:
    print("refused:", str(error).splitlines()[0])

# Keep the declarations honest: run every kernel on samples and compare what it did with what it declared.
report = thunder_ext.check_executor(ex, {
    prims.copy_: [Sample((torch.randn(3), torch.zeros(3)), {"grad_enabled": False})],
    ltorch.copy_: [(torch.zeros(2, 3), torch.randn(2, 3))],
    ltorch.index_copy_: [(torch.zeros(5, 2), 0, torch.tensor([4, 1]), torch.randn(2, 2))],
}).raise_if_failed()
print(f"check_executor: {len(report.reports)} kernels checked, all declarations true")


def decode_step(k_cache, v_cache, pos, k_new, v_new, q, last_out):
    k_cache.index_copy_(0, pos, k_new)  # vendor kernel: writes the cache in place
    v_cache.index_copy_(0, pos, v_new)
    scores = torch.softmax(q @ k_cache.t() / k_cache.shape[-1] ** 0.5, dim=-1)
    out = scores @ v_cache
    last_out.copy_(out)  # vendor kernel
    k_cache.mul_(0.99)  # decay, fused by torchcompile after the vendor write (WAW/RAW order matters)
    return out + q


def inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g), torch.tensor([6, 2]),
            torch.randn(2, 4, generator=g), torch.randn(2, 4, generator=g), torch.randn(3, 4, generator=g),
            torch.zeros(3, 4)]


expected_args = inputs()
expected = decode_step(*expected_args)
runs = {"torchcompile, consecutive": ([ex, "torchcompile"], "consecutive"),
        "torchcompile, dataflow": ([ex, "torchcompile"], "dataflow"),
        "torch executor only": ([ex], "consecutive")}  # k_cache.mul_ then ends in prims.copy_: vendor kernel
for label, (executors, fusion_type) in runs.items():
    calls.clear()
    args = inputs()
    jitted = thunder_ext.jit(decode_step, executors=executors, fusion_type=fusion_type)
    out = jitted(*args)
    torch.testing.assert_close(out, expected)
    for name, got, want in zip(("k_cache", "v_cache", "pos", "k_new", "v_new", "q", "last_out"), args,
                               expected_args, strict=True):
        torch.testing.assert_close(got, want, msg=lambda m, name=name: f"{name} differs from eager: {m}")
    vendor_ops = str(thunder.last_traces(jitted)[-1]).count(" = vendor_")
    print(f"{label:>26}: matches eager; {vendor_ops} vendor op(s) in the final trace, kernel calls {dict(calls)}")
    assert calls["Tensor.index_copy_"] == 2 and calls["Tensor.copy_"] == 1, calls
