"""In-place programs through ``thunder.jit`` (stock) and ``thunder_ext.jit``: correctness vs eager and trace size.

Run: ``python examples/thunder_inplace.py``. For each program and fusion type it prints whether the result and the
mutated inputs match eager, and the bound symbols / fusion regions of the final trace.
"""

from __future__ import annotations

import torch

import thunder_ext
import thunder


def sgd_step(p, g):
    p.add_(g, alpha=-0.1)


def remat(a):
    b = a * 2
    a.add_(1)
    c = a.sin()
    return b + c


def relu_chain(x):
    x.mul_(2).relu_()
    x.add_(1).tanh_()
    return x * x * x


def transposed(x, y):
    y.add_(1)
    return x * 2


PROGRAMS = {
    "sgd_step": (sgd_step, lambda: (torch.ones(8), torch.ones(8))),
    "remat": (remat, lambda: (torch.arange(8.0),)),
    "relu_chain": (relu_chain, lambda: (torch.linspace(-1, 1, 8),)),
    "f(x, x.t())": (transposed, lambda: (lambda b: (b, b.t()))(torch.arange(4.0).reshape(2, 2))),
}


def run(jit, fn, make_args, fusion_type, **kwargs):
    args, eager_args = make_args(), make_args()
    expected = fn(*eager_args)
    jfn = jit(fn, executors=["torchcompile"], fusion_type=fusion_type, **kwargs)
    got = jfn(*args)
    ok = all(torch.allclose(a, e) for a, e in zip(args, eager_args, strict=True))
    ok = ok and (expected is None or torch.allclose(got, expected))
    last = thunder.last_traces(jfn)[-1]
    fusions = sum(b.sym.is_fusion for b in last.bound_symbols)
    return ok, len(last.bound_symbols), fusions


def main() -> None:
    print(f"{'program':<14}{'fusion':<13}{'pipeline':<24}{'correct':>8}{'bsyms':>7}{'fusions':>9}")
    for name, (fn, make_args) in PROGRAMS.items():
        for fusion_type in ("consecutive", "dataflow"):
            for label, jit, kwargs in (
                ("thunder.jit", thunder.jit, {}),
                ("thunder.jit skip=True", thunder.jit, {"skip_inplace_alias_updates": True}),
                ("thunder_ext.jit", thunder_ext.jit, {}),
            ):
                try:
                    ok, bsyms, fusions = run(jit, fn, make_args, fusion_type, **kwargs)
                    print(f"{name:<14}{fusion_type:<13}{label:<24}{str(ok):>8}{bsyms:>7}{fusions:>9}")
                except Exception as e:  # noqa: BLE001 - a stock failure is a result to show
                    print(f"{name:<14}{fusion_type:<13}{label:<24}{'error':>8}  {type(e).__name__}")


if __name__ == "__main__":
    main()
