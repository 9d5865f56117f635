"""Standalone reproducers of six ``torch.compile`` bugs (plain PyTorch, CPU; found with torch 2.13).

    python benchmarks/inductor_bug_repro.py

Each case runs a function eagerly and under ``torch.compile(fullgraph=True)`` on identical fresh inputs and prints
the arguments after the call and the returned values of both, with ``OK``/``WRONG`` (storage-sharing cases print
whether the result shares the argument's storage). No Thunder involved.

1. **Write-back reads an input already overwritten** (``remove_noop_ops``). After functionalization the graph
   ends with one ``copy_`` per mutated input, ordered by placeholder (first use). The post-grad pass
   ``remove_noop_ops`` replaces ``aten.copy``/``aten.clone``/same-shape views (and other metadata no-ops) by their
   source, so the write-back of ``c`` in ``c.copy_(b); b.add_(1)`` becomes ``copy_(c, b)`` — the *placeholder*
   ``b`` — placed after ``copy_(b, b + 1)`` when ``b`` was used first: ``c`` receives the new ``b``. Chains
   (``a.copy_(b); c.copy_(a)``), ``clone`` (``t = b.clone(); b.add_(1); c.copy_(t)``) and views
   (``c.copy_(b.reshape(3, 2))``, ``b[0]``, ``unsqueeze``) are affected; ``b.t()`` is not (its strides differ, so
   the copy is not a no-op). The joint-graph pass ``remove_no_ops`` already refuses a replacement that is mutated
   in place (pytorch/pytorch#174187); ``remove_noop_ops`` only refuses to alias an *output* with an input.
2. **Reinplaced ``index_put`` result returned or written back** (``reinplace_inplaceable_ops``): in
   ``x.index_put_(i, v); y = x.clone(); x.add_(1); return y`` the clone is dropped (its source is not an input
   yet) and ``index_put`` is then reinplaced into ``x``'s buffer, so ``y`` *is* ``x``: it returns ``x + 1``, and
   without the ``add_`` it returns a tensor sharing storage with the argument ``x``. The pass ignores uses "after
   the ``copy_`` epilogue", but graph outputs and other inputs' write-backs read the reinplaced value exactly there.
   ``index_copy_`` and ``x[0] = v[0]`` (a view scatter) behave the same. With the clone as the *source*
   (``t = a.clone(); a.index_copy_(0, [1, 0], t)``, also for a destination made in the graph: ``t = b * 2;
   t.index_copy_(0, [1, 0], t.clone())``) the reinplaced ``index_put_`` reads rows it already overwrote.
3. **``add(x, mm(a, b), alpha=k)`` becomes ``addmm(x, a, b)``**: the post-grad ``addmm`` pattern matches
   ``aten.add.Tensor`` without looking at ``alpha`` and drops it (also for ``F.linear`` and a same-shape view of
   the ``mm``; ``sub`` and batched ``matmul`` are fine).
4. **A view of an aliased input returned after a write** (AOTAutograd synthetic bases): with ``b = a.t()`` (or
   ``a[:, :2]``, ``a[0]``, ``a.view(-1)``) passed next to ``a``, ``a.mul_(2); return b.unsqueeze(0)`` raises
   ``AssertionError: incorrect out shape after application of ViewMeta sequence`` (the output's view chain is
   replayed on the base); writing through ``b`` instead, or returning ``b[0]``, fails the same way, and
   ``b.view(b.shape)``/``b.reshape(6)`` fail or return a wrong view. Fine: no write, ``b`` itself returned,
   out-of-place results, a view of ``a`` returned, the same tensor passed twice, two views without their base.
5. **An index write reads its own destination** (joint-graph ``constant_fold_uniform_value`` + ``remove_no_ops``, then
   ``reinplace_inplaceable_ops``): ``t = b + 1; return torch.index_copy(t, 0, [1, 0], t + torch.zeros_like(t))`` — no
   mutation in the program — returns row 0 in both rows. The constant folder proves ``zeros_like(t)`` (also ``zero_()``,
   ``fill_``, ``x * 0``, pointwise ops of such, a whole-range ``x[0:2] = 0`` on two rows) uniform, ``remove_no_ops``
   folds ``t + zeros`` (``- zeros``, ``* ones``, ``/ ones``) to ``t``, and ``index_put(t, [idx], t)`` is then
   reinplaced: ``can_inplace`` only looks at uses of ``t`` *after* the node, not at the node's own ``values`` operand,
   so the scatter reads rows it already wrote (eager ``index_put_`` refuses such overlap: "some elements of the input
   tensor and the written-to tensor refer to a single memory location"). Found by the fuzzer as
   ``b.add_(2 * b); t = (4 * b).zero_(); b.index_copy_(0, [1, 0], t + b)``; ``index_add_`` and ``index_put`` behave the
   same; ``zeros - t``, ``t * 2``, a fold of an argument the graph writes back (``remove_no_ops`` refuses mutated
   replacements) are fine.
6. **Identity arithmetic returns the argument itself** (``remove_no_ops``): ``return b + torch.zeros_like(b)``
   returns a tensor sharing storage with ``b`` (``remove_noop_ops`` refuses to alias an output with an input,
   ``remove_no_ops`` does not), and after a reinplaced ``index_put_`` (case 2), ``y = x + torch.zeros_like(x);
   x.add_(1); return y`` returns ``x + 1``.

``thunder_ext`` works around all six for Thunder's torch.compile executors (:mod:`thunder_ext.passes.inductor_guard`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch

IDX = torch.tensor([0, 1])


def noop_copy_chain(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    a.copy_(b)
    c.copy_(a)  # c == old b
    b.mul_(3)


def noop_copy_first_use(b: torch.Tensor, c: torch.Tensor) -> None:
    b.sin()  # only makes b the first placeholder (its write-back then precedes c's)
    c.copy_(b)  # c == old b
    b.add_(1)


def noop_clone_then_copy(b: torch.Tensor, c: torch.Tensor) -> None:
    t = b.clone()
    b.add_(1)
    c.copy_(t)  # c == old b


def noop_view_copy(b: torch.Tensor, c: torch.Tensor) -> None:
    b.sin()
    c.copy_(b.reshape(3, 2))  # c == old b, reshaped
    b.add_(1)


def reinplaced_clone_returned(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x.index_put_((IDX,), v, accumulate=True)
    y = x.clone()  # a snapshot
    x.add_(1)
    return y


def reinplaced_clone_aliases_input(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x.index_put_((IDX,), v, accumulate=True)
    return x.clone()  # must not share storage with x


def reinplaced_copy_written_back(x: torch.Tensor, v: torch.Tensor, c: torch.Tensor) -> None:
    x.index_put_((IDX,), v)
    c.copy_(x)  # c == x after index_put_
    x.add_(1)


def reinplaced_reads_own_snapshot(a: torch.Tensor) -> None:
    t = a.clone()
    a.index_copy_(0, torch.tensor([1, 0]), t)  # swap rows of a


def reinplaced_reads_own_snapshot_of_intermediate(b: torch.Tensor) -> torch.Tensor:
    t = b * 2
    t.index_copy_(0, torch.tensor([1, 0]), t.clone())  # swap rows of t
    return t


def folded_index_copy_reads_itself(b: torch.Tensor) -> torch.Tensor:
    t = b + 1
    return torch.index_copy(t, 0, torch.tensor([1, 0]), t + torch.zeros_like(t))  # t with its rows swapped


def folded_fuzz_program(a: torch.Tensor, b: torch.Tensor) -> None:
    t0 = torch.add(b, b)
    t1 = b.add_(t0, alpha=1.0)
    t2 = torch.add(t1, t1)
    t3 = torch.add(t2, t2)
    t4 = t3.zero_()
    t5 = torch.add(t4, t1)  # == t1
    t1.index_copy_(0, torch.tensor([1, 0]), t5)  # swap rows of b


def folded_zeroed_argument(b: torch.Tensor, c: torch.Tensor) -> None:
    c.zero_()
    b.add_(1)
    b.index_copy_(0, torch.tensor([1, 0]), b + c)


def folded_ones(b: torch.Tensor) -> None:
    b.add_(1)
    b.index_copy_(0, torch.tensor([1, 0]), b * torch.ones_like(b))


def folded_index_add(b: torch.Tensor) -> None:
    b.add_(1)
    b.index_add_(0, torch.tensor([1, 0]), b + torch.zeros_like(b))


def folded_input_returned(b: torch.Tensor) -> torch.Tensor:
    return b + torch.zeros_like(b)  # must not share storage with b


def folded_reinplaced_returned(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x.index_put_((IDX,), v, accumulate=True)
    y = x + torch.zeros_like(x)  # a snapshot
    x.add_(1)
    return y


def addmm_alpha(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(x, a @ b, alpha=0.5)


def aliased_view_returned(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.mul_(2)
    return b.unsqueeze(0)  # b aliases a with other metadata (a.t(), a[:, :2], a.view(-1))


def aliased_view_returned_write_through_view(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b.mul_(2)
    return a.sum(0), b.unsqueeze(2)


CASES: tuple[tuple[str, Callable[..., object], Sequence[tuple[int, ...]]], ...] = (
    ("1 a.copy_(b); c.copy_(a); b.mul_(3)", noop_copy_chain, [(2,), (2,), (2,)]),
    ("1 b first; c.copy_(b); b.add_(1)", noop_copy_first_use, [(2, 3), (2, 3)]),
    ("1 t = b.clone(); b.add_(1); c.copy_(t)", noop_clone_then_copy, [(2, 3), (2, 3)]),
    ("1 c.copy_(b.reshape(3, 2)); b.add_(1)", noop_view_copy, [(2, 3), (3, 2)]),
    ("2 x.index_put_; y = x.clone(); x.add_(1)", reinplaced_clone_returned, [(2, 3), (2, 3)]),
    ("2 x.index_put_; c.copy_(x); x.add_(1)", reinplaced_copy_written_back, [(2, 3), (2, 3), (2, 3)]),
    ("2 t = a.clone(); a.index_copy_(0, [1, 0], t)", reinplaced_reads_own_snapshot, [(2, 3)]),
    ("2 t = b * 2; t.index_copy_(0, [1, 0], t.clone())", reinplaced_reads_own_snapshot_of_intermediate, [(2, 3)]),
    ("3 torch.add(x, a @ b, alpha=0.5)", addmm_alpha, [(2, 3), (2, 3), (3, 3)]),
    ("5 t = b + 1; torch.index_copy(t, 0, [1, 0], t + zeros_like(t))", folded_index_copy_reads_itself, [(2, 3)]),
    ("5 the fuzzer's program (issue 13)", folded_fuzz_program, [(2, 3), (2, 3)]),
    ("5 c.zero_(); b.add_(1); b.index_copy_(0, [1, 0], b + c)", folded_zeroed_argument, [(2, 3), (2, 3)]),
    ("5 b.add_(1); b.index_copy_(0, [1, 0], b * ones_like(b))", folded_ones, [(2, 3)]),
    ("5 b.add_(1); b.index_add_(0, [1, 0], b + zeros_like(b))", folded_index_add, [(2, 3)]),
    ("6 x.index_put_; y = x + zeros_like(x); x.add_(1)", folded_reinplaced_returned, [(2, 3), (2, 3)]),
)

SHARING_CASES: tuple[tuple[str, Callable[..., torch.Tensor], Sequence[tuple[int, ...]]], ...] = (
    ("2 x.index_put_; return x.clone()", reinplaced_clone_aliases_input, [(2, 3), (2, 3)]),
    ("6 return b + zeros_like(b)", folded_input_returned, [(2, 3)]),
)
"""Cases whose result must be a new tensor: torch.compile's shares an argument's storage."""

ALIASED_CASES: tuple[tuple[str, Callable[..., object], Callable[[torch.Tensor], tuple[torch.Tensor, ...]]], ...] = (
    ("4 f(a, a.t()): a.mul_(2); return b.unsqueeze(0)", aliased_view_returned, lambda a: (a, a.t())),
    ("4 f(a, a.view(-1)): a.mul_(2); return b.unsqueeze(0)", aliased_view_returned, lambda a: (a, a.view(-1))),
    ("4 f(a, a[:, :2]): b.mul_(2); return a.sum(0), b.unsqueeze(2)", aliased_view_returned_write_through_view,
     lambda a: (a, a[:, :2])),
)
"""Case 4: each function is called with ``a`` (shape ``(2, 3)``) and a view of it."""


def _inputs(shapes: Sequence[tuple[int, ...]]) -> list[torch.Tensor]:
    return [torch.arange(float(torch.Size(s).numel())).reshape(s) + 10 * k for k, s in enumerate(shapes)]


def _as_tuple(result: object) -> tuple[torch.Tensor, ...]:
    if result is None:
        return ()
    return result if isinstance(result, tuple) else (result,)  # type: ignore[return-value]


def run(name: str, fn: Callable[..., object], shapes: Sequence[tuple[int, ...]]) -> bool:
    return compare(name, fn, lambda: _inputs(shapes))


def run_aliased(name: str, fn: Callable[..., object],
                views: Callable[[torch.Tensor], tuple[torch.Tensor, ...]]) -> bool:
    return compare(name, fn, lambda: list(views(_inputs([(2, 3)])[0])))


def compare(name: str, fn: Callable[..., object], make_inputs: Callable[[], list[torch.Tensor]]) -> bool:
    torch._dynamo.reset()
    eager_args = make_inputs()
    eager = _as_tuple(fn(*eager_args))
    compiled_args = make_inputs()
    try:
        compiled = _as_tuple(torch.compile(fn, fullgraph=True)(*compiled_args))
    except Exception as error:  # noqa: BLE001 - a crash is reported like a wrong result
        print(f"FAIL  {name}\n      torch.compile raised {type(error).__name__}: {str(error).splitlines()[0]}")
        return False
    ok = all(torch.equal(e, c) for e, c in zip(eager_args + list(eager), compiled_args + list(compiled), strict=False))
    print(f"{'OK   ' if ok else 'WRONG'} {name}")
    if not ok:
        print(f"      eager    args={[t.tolist() for t in eager_args]} returns={[t.tolist() for t in eager]}")
        print(f"      compiled args={[t.tolist() for t in compiled_args]} returns={[t.tolist() for t in compiled]}")
    return ok


def sharing_check(name: str, fn: Callable[..., torch.Tensor], shapes: Sequence[tuple[int, ...]]) -> bool:
    """Whether the result of ``fn`` compiled is a new tensor (eager semantics), not one of the arguments' storage."""
    torch._dynamo.reset()
    args = _inputs(shapes)
    y = torch.compile(fn, fullgraph=True)(*args)
    shared = any(y.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in args)
    print(f"{'WRONG' if shared else 'OK   '} {name}  (result shares an argument's storage: {shared})")
    return not shared


def main() -> int:
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, eager vs torch.compile(fullgraph=True), CPU")
    results = ([run(*case) for case in CASES] + [sharing_check(*case) for case in SHARING_CASES]
               + [run_aliased(*case) for case in ALIASED_CASES])
    print(f"{results.count(False)} of {len(results)} cases miscompiled")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
