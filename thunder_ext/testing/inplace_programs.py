"""The catalog's programs that write tensors in place: where eager's rules for an in-place write raise or round,
the compiled program must too.

* ``result_type`` — an in-place op whose result type cannot be cast to the written tensor's dtype raises
  (``int.add_(0.5)``, ``bool.add_(1)``, ``out=`` of another dtype); castable ones compute;
* ``overlap`` — operands that partially overlap in memory raise (arguments that alias, views made inside the
  function); full overlap and disjoint views compute;
* ``low_precision`` — a bf16/fp16 tensor read after an in-place write is read as stored, rounded (torchcompile
  regions must not keep the unrounded value);
* ``untraceable`` — ops stock Thunder fails to trace (``.data =``, ``t_``, ``out=``, ``scatter_reduce_``,
  ``index_fill_``, ``index_add_(alpha=)``, ``|=`` on bool, ``BatchNorm2d(momentum=None)``) compute as eager, or
  are refused with a typed error under autograd.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .catalog import Program, collector, ints, randn, same

__all__ = ["PROGRAMS"]

PROGRAMS: list[Program] = []
"""In the order of :data:`.catalog.CLASSES`."""
program = collector(PROGRAMS)


# in-place result types ------------------------------------------------------------------------------------------
@program("result_type", raises=RuntimeError, issue=True, make=same(ints))
def int_add_float(a):
    return a.add_(0.5)


@program("result_type", raises=RuntimeError, issue=True,
         make=same(ints, lambda: torch.full((4,), 1.5)))
def int_mul_float_tensor(a, b):
    return a.mul_(b)


@program("result_type", raises=RuntimeError, issue=True,
         make=same(lambda: torch.tensor([True, False, True])))
def bool_add_int(a):
    return a.add_(1)


@program("result_type", raises=RuntimeError, issue=True, make=same(ints))
def int_div(a):
    return a.div_(2)


@program("result_type", raises=RuntimeError, make=same(lambda: ints(dtype=torch.int32)))
def int_augmented_add_float(a):
    a += 0.5
    return a


@program("result_type", raises=RuntimeError, make=same(ints))
def int_sqrt_(a):
    return a.sqrt_()


@program("result_type", raises=RuntimeError,
         make=same(lambda: torch.ones(4), lambda: torch.full((4,), 0.5), ints))
def out_int_from_float(a, b, out):
    return torch.add(a, b, out=out)


@program("result_type", raises=RuntimeError, make=same(ints, lambda: torch.tensor(1.5)))
def int_add_0d_float_tensor(a, b):
    return a.add_(b)


@program("result_type", raises=RuntimeError, grad=True,
         make=same(lambda: torch.ones(4, requires_grad=True), ints))
def result_type_under_grad(w, idx):
    h = w * 2
    idx.add_(0.5)
    return h


@program("result_type", make=same(ints, lambda: torch.tensor([True, False, True, False]), lambda: torch.tensor([1])))
def int_scalar_fills_cast(a, mask, index):  # eager casts a Scalar value: no error
    a.masked_fill_(mask, 0.5)
    a.index_fill_(0, index, 2.5)
    return a


@program("result_type", make=same(lambda: torch.ones(4, dtype=torch.float16), lambda: torch.arange(4.0),
                                   lambda: ints(dtype=torch.int32), lambda: torch.tensor(2.5, dtype=torch.float64)))
def castable_in_place(h, f, i, d):  # result types that can be cast: no error
    h.add_(f)
    i.add_(ints())
    f.mul_(d)
    return h, i, f


@program("result_type", make=same(ints, lambda: torch.full((4,), 1.5), lambda: torch.zeros(4)))
def copy_converts(a, f, z):  # Tensor.copy_ converts by definition; logical ops write bool results
    a.copy_(f)
    z.logical_or_(f)
    return a, z


# partial overlap ------------------------------------------------------------------------------------------------
def _storage(n: int = 8) -> torch.Tensor:
    return torch.arange(float(n))


@program("overlap", raises=RuntimeError, issue=True,
         make=lambda k: (lambda x: (x[0:3], x[1:4]))(_storage()))
def slices_add(a, b):
    return a.add_(b)


@program("overlap", raises=RuntimeError, make=lambda k: (lambda x: (x[1:], x[:-1]))(_storage()))
def shifted_mul(a, b):
    a.mul_(b)
    return a.sum()


@program("overlap", raises=RuntimeError,
         make=lambda k: (lambda x: (x, x.t()))(torch.arange(9.0).reshape(3, 3)))
def transposed_add(a, b):
    return a.add_(b)


@program("overlap", raises=RuntimeError, make=lambda k: (lambda x: (x[2:6], x[0:4]))(_storage()))
def copy_partial(a, b):
    return a.copy_(b)


@program("overlap", raises=RuntimeError, make=lambda k: (lambda x: (x[0:3], x[1:4]))(_storage()))
def out_partial(out, b):
    return torch.add(b, 1, out=out)


@program("overlap", raises=RuntimeError, make=lambda k: (_storage(),))
def views_made_inside(x):
    x[0:3].add_(x[1:4])
    return x


@program("overlap", raises=RuntimeError, make=lambda k: (torch.ones(3, 3),))
def row_broadcast_into_matrix(x):  # the argument written, a view of it read
    return x.add_(x[0])


@program("overlap", make=lambda k: (_storage(),))
def disjoint_views_inside(x):  # no overlap: eager's values
    x[:4].add_(x[4:])
    return x


@program("overlap", calls=3, raises=RuntimeError, raises_on=(0, 2),
         make=lambda k: ((_storage(), torch.arange(16.0)[::2], _storage())[k],))
def views_inside_layouts(x):  # contiguous: eager raises; strided (not dense): eager cannot tell, no error
    x[0:3].add_(x[1:4])
    return x


@program("overlap", calls=4, raises=RuntimeError, raises_on=(1, 3),
         make=lambda k: (lambda x: [(x, x), (x[0:3], x[1:4]), (x[:4], x[4:]), (x[1:5], x[2:6])][k])(_storage()))
def alias_pattern_sequence(a, b):  # full overlap, partial, disjoint, partial: one alias pattern, one compiled entry
    a.add_(b)
    return a * 2


@program("overlap", raises=RuntimeError, grad=True,
         make=lambda k: (lambda x: (x[0:3], x[1:4], torch.ones(3, requires_grad=True)))(_storage()))
def overlap_under_grad(a, b, w):
    a.add_(b)
    return a * w


# low precision read after write -----------------------------------------------------------------------------------
@program("low_precision", issue=True, make=same(lambda: randn(64, dtype=torch.bfloat16), lambda: randn(64, seed=1)))
def bf16_write_then_read(a, b):
    a.add_(b)
    return a.float()


@program("low_precision", make=same(lambda: randn(64, dtype=torch.float16), lambda: randn(64, seed=1)))
def fp16_write_then_read(a, b):
    a.add_(b)
    return a.float() * 3


@program("low_precision", make=same(lambda: randn(64, dtype=torch.bfloat16), lambda: randn(64, seed=1)))
def bf16_chain(a, b):
    a.mul_(b)
    a.add_(1.0)
    return a.float() * 2


@program("low_precision", make=same(lambda: randn(64, dtype=torch.bfloat16), lambda: randn(64, seed=1)))
def bf16_intermediate(a, b):
    h = a * 2
    h.add_(b)
    return h.float() * 3


@program("low_precision", make=same(lambda: randn(8, dtype=torch.bfloat16), lambda: torch.tensor([0, 2, 2, 5]),
                                     lambda: randn(4, seed=1, dtype=torch.bfloat16)))
def bf16_index_add(a, index, source):
    a.index_add_(0, index, source)
    return a.float() * 3


@program("low_precision", grad=True, make=same(lambda: randn(64, dtype=torch.bfloat16), lambda: randn(64, seed=1),
                                                lambda: torch.ones(64, requires_grad=True)))
def bf16_training(a, x, w):
    a.add_(x)
    return a.float() * w


@program("low_precision", grad=True, make=same(lambda: randn(64).requires_grad_(), lambda: randn(64, seed=1)))
def bf16_activation_training(w, x):
    h = (w * 2).bfloat16()
    h.add_(x)
    return h.float() * w


# ops that failed to trace -----------------------------------------------------------------------------------------
@program("untraceable", issue=True, make=same(lambda: torch.zeros(3), lambda: torch.ones(2, 2)))
def data_assignment(a, b):
    a.data = b
    return a + 1


@program("untraceable", issue=True, make=same(lambda: torch.arange(6.0).reshape(2, 3)))
def t_(a):
    a.t_()
    return a * torch.arange(2.0)


@program("untraceable", issue=True,
         make=same(lambda: torch.ones(3), lambda: torch.arange(3.0), lambda: torch.zeros(3)))
def out_add(a, b, c):
    torch.add(a, b, out=c)
    return c


@program("untraceable", issue=True, make=same(lambda: torch.zeros(4), lambda: torch.tensor([0, 1, 1, 3]),
                                               lambda: torch.arange(4.0)))
def scatter_reduce_(a, index, source):
    return a.scatter_reduce_(0, index, source, "sum")


@program("untraceable", issue=True, make=same(lambda: torch.zeros(4), lambda: torch.tensor([0, 2])))
def index_fill_(a, index):
    return a.index_fill_(0, index, 2.5)


@program("untraceable", issue=True, make=same(lambda: torch.zeros(4), lambda: torch.tensor([0, 2]),
                                               lambda: torch.ones(2)))
def index_add_alpha(a, index, source):
    return a.index_add_(0, index, source, alpha=2)


@program("untraceable", issue=True, make=same(lambda: torch.tensor([True, False, False]),
                                               lambda: torch.tensor([False, True, False])))
def or_assign_bool(a, b):
    a |= b
    return a


@program("untraceable", issue=True, module=True, calls=3, make=lambda k: (randn(4, 3, 2, 2, seed=k),))
def batch_norm_2d_cumulative():
    return nn.BatchNorm2d(3, momentum=None)


@program("untraceable", grad=True, refused=NotImplementedError,
         make=same(lambda: torch.zeros(3), lambda: torch.ones(3), lambda: torch.ones(3, requires_grad=True)))
def data_assignment_under_grad(a, b, w):
    a.data = b
    return a * w


@program("untraceable", grad=True, refused=NotImplementedError,
         make=same(lambda: torch.arange(6.0).reshape(2, 3), lambda: torch.ones(3, 2, requires_grad=True)))
def t_under_grad(a, w):
    a.t_()
    return a * w


@program("untraceable", make=same(lambda: torch.zeros(1, 3, 1)))
def squeeze_(a):
    a.squeeze_()
    return a + torch.arange(3.0)


@program("untraceable", make=same(lambda: randn(2, 3), lambda: randn(3, 4, seed=1), lambda: torch.zeros(2, 4)))
def out_matmul(a, b, c):
    torch.matmul(a, b, out=c)
    return c.sum()


@program("untraceable", raises=RuntimeError, grad=True,
         make=same(lambda: torch.arange(3.0), lambda: torch.ones(3, requires_grad=True), lambda: torch.zeros(3)))
def out_under_grad(a, w, c):  # eager: "functions with out=... arguments don't support automatic differentiation"
    torch.mul(a, w, out=c)
    return c * 2


@program("untraceable", grad=True, make=same(lambda: torch.arange(3.0), lambda: torch.ones(3, requires_grad=True),
                                              lambda: torch.zeros(3)))
def out_under_no_grad(a, w, c):  # out= where nothing records autograd: eager computes
    with torch.no_grad():
        torch.mul(a, w, out=c)
    return c * w


@program("untraceable", make=same(lambda: torch.zeros(4), lambda: torch.tensor([0, 1, 1, 3]),
                                   lambda: torch.arange(4.0)))
def scatter_reduce_amax_exclude_self(a, index, source):
    return a.scatter_reduce_(0, index, source, "amax", include_self=False)


@program("untraceable", grad=True, refused=NotImplementedError,
         make=same(lambda: torch.ones(4, requires_grad=True), lambda: torch.tensor([0, 2]),
                    lambda: torch.ones(2, requires_grad=True)))
def index_add_alpha_under_grad(w, index, source):
    a = w * 1
    return a.index_add_(0, index, source, alpha=2)


@program("untraceable", grad=True, make=same(lambda: torch.ones(4, requires_grad=True), lambda: torch.tensor([0, 2])))
def index_fill_under_grad(w, index):
    a = w * 3
    return a.index_fill_(0, index, 2.5)


@program("untraceable",
         make=same(lambda: torch.tensor([True, False, True]), lambda: torch.tensor([True, True, False])))
def and_xor_assign_bool(a, b):
    a &= b
    b ^= a
    return a, b


class BatchNormStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(2, 3, 1)
        self.norm = nn.BatchNorm2d(3, momentum=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x)).relu()


@program("untraceable", module=True, grad=True, calls=3, tolerance={"rtol": 1e-3, "atol": 1e-4},
         make=lambda k: (randn(4, 2, 3, 3, seed=k),))
def batch_norm_cumulative_training():
    return BatchNormStep()
