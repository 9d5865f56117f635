"""Golden traces: what DCE, the partitioner and reinplacing make of a handful of small programs, pinned as the
printed Thunder trace (PyTorch's ``assertExpectedInline`` idiom), so that every change of behaviour is a visible
text diff.

Printed traces leave out what does not describe the program: import lines, provenance headers (they carry
timings) and source-location comments (they carry this file's line numbers). To update a golden text after an
intended change, run the test and paste the ``actual`` text the failure prints.
"""

from __future__ import annotations

import re
import textwrap

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402  (applies the import shim before thunder)

# isort: split
import thunder  # noqa: E402

from thunder_ext.passes.inplace_kernels import Reinplace  # noqa: E402

_SOURCE_LINE = re.compile(r"# .*:\d+: ")


def printed(trace: object, depth: int = 1) -> str:
    """The trace as Python, without imports, provenance headers, source locations and blank lines."""
    lines = trace.python(print_depth=depth, include_decorators=False).splitlines()  # type: ignore[attr-defined]
    return "\n".join(line for line in lines
                     if line.strip() and not line.strip().startswith(("import ", "from ", "# Constructed by"))
                     and not _SOURCE_LINE.match(line.strip()))


def expect(actual: str, expected: str) -> None:
    expected = textwrap.dedent(expected).strip("\n")
    assert actual == expected, f"golden trace changed; if intended, paste the actual text:\n{actual}"


def made_by(jfn: object, provenance: str) -> list[object]:
    return [t for t in thunder.last_traces(jfn) if provenance in str(t.get_provenance())]


# --- dead code elimination --------------------------------------------------------------------------------------
def dead_and_live_writes(a, b):
    c = a * 2  # noqa: F841 - dead: nothing uses it
    t = b.clone()
    torch._foreach_mul_([t], 2.0)  # dead: writes a local nobody reads
    torch._foreach_add_([a], 1.0)  # live: writes an argument (it has no outputs: Thunder's own DCE drops it)
    return b * 3


def test_dce_drops_dead_writes_and_keeps_live_ones():
    jfn = thunder_ext.jit(dead_and_live_writes, executors=["torch"])
    a = torch.ones(3)
    jfn(a, torch.ones(3))
    torch.testing.assert_close(a, torch.full((3,), 2.0))
    first_dce = made_by(jfn, "Effect-aware dead code elimination")[0]
    before = thunder.last_traces(jfn)[thunder.last_traces(jfn).index(first_dce) - 1]
    expect(printed(before), """
        def computation(a, b):
          # a: "cpu f32[3]"
          # b: "cpu f32[3]"
          c = ltorch.mul(a, 2)  # c: "cpu f32[3]"
          t = ltorch.clone(b, memory_format=_torch_memory_format_0)  # t: "cpu f32[3]"
          aten__foreach_mul__Scalar([t], 2.0)
          aten__foreach_add__Scalar([a], 1.0)
          t2 = ltorch.mul(b, 3)  # t2: "cpu f32[3]"
          return {'output': (t2,), 'flat_args': [a, b]}
    """)
    expect(printed(first_dce), """
        def computation(a, b):
          # a: "cpu f32[3]"
          # b: "cpu f32[3]"
          aten__foreach_add__Scalar([a], 1.0)
          t2 = ltorch.mul(b, 3)  # t2: "cpu f32[3]"
          return {'output': (t2,), 'flat_args': [a, b]}
    """)


# --- partitioning -----------------------------------------------------------------------------------------------
def around_an_opaque_write(a, b):
    c = a * 2
    torch._foreach_mul_([b], 2.0)  # not fusible (an opaque torch op); writes b
    d = b + c  # reads b after the write (RAW)
    a.add_(1)  # overwrites what c = a * 2 read (WAR)
    return a * d


@pytest.mark.parametrize(("fusion_type", "expected"), [
    pytest.param("consecutive", """
        def computation(a, b):
          # a: "cpu f32[3]"
          # b: "cpu f32[3]"
          [c] = TorchCompile0(a)
            # c = ltorch.mul(a, 2)  # c: "cpu f32[3]"
          aten__foreach_mul__Scalar([b], 2.0)
          [t4] = TorchCompile1(b, c, a)
            # d = ltorch.add(b, c, alpha=1)  # d: "cpu f32[3]"
            # t3 = ltorch.add_(a, 1, alpha=1)  # t3: "cpu f32[3]"
            # t4 = ltorch.mul(a, d)  # t4: "cpu f32[3]"
          del c
          return (t4,)
    """, id="consecutive"),
    pytest.param("dataflow", """
        def computation(a, b):
          # a: "cpu f32[3]"
          # b: "cpu f32[3]"
          aten__foreach_mul__Scalar([b], 2.0)
          [t4] = TorchCompile0(a, b)
            # c = ltorch.mul(a, 2)  # c: "cpu f32[3]"
            # d = ltorch.add(b, c, alpha=1)  # d: "cpu f32[3]"
            # t3 = ltorch.add_(a, 1, alpha=1)  # t3: "cpu f32[3]"
            # t4 = ltorch.mul(a, d)  # t4: "cpu f32[3]"
          return (t4,)
    """, id="dataflow"),
])
def test_partition_keeps_effect_edges(fusion_type, expected):
    jfn = thunder_ext.jit(around_an_opaque_write, executors=["torchcompile"], fusion_type=fusion_type)
    a, b = torch.ones(3), torch.ones(3)
    torch.testing.assert_close(jfn(a, b), around_an_opaque_write(torch.ones(3), torch.ones(3)))
    expect(printed(thunder.last_traces(jfn)[-1], depth=2), expected)


# --- reinplacing --------------------------------------------------------------------------------------------------
def in_place_chain(a, b):
    c = a * b
    a.add_(b)
    a.mul_(c)
    return c


def test_reinplace_rewrites_unobservable_pairs():
    jfn = thunder_ext.jit(in_place_chain, executors=["torch"])
    jfn(torch.ones(3), torch.ones(3))
    expect(printed(thunder.last_traces(jfn)[-1]), """
        def computation(a, b):
          # a: "cpu f32[3]"
          # b: "cpu f32[3]"
          t10 = torch.mul(a, b)  # t10: "cpu f32[3]"
          t12 = reinplace_add_(a, b, alpha=1)  # t12: "cpu f32[3]"
          del t12
          t14 = reinplace_mul_(a, t10)  # t14: "cpu f32[3]"
          del t14
          return (t10,)
    """)


def test_reinplace_keeps_a_pair_whose_operand_may_alias_the_target():
    reinplace = Reinplace()
    jfn = thunder_ext.jit(in_place_chain, executors=["torch"], transforms=[reinplace])
    x = torch.ones(3)
    jfn(x, x)  # a and b are one tensor: add(a, b) in place would read what it writes
    expect(printed(thunder.last_traces(jfn)[-1]), """
        def computation(a, b):
          # a: "cpu f32[3]"
          # b: "cpu f32[3]"
          t10 = torch.mul(a, b)  # t10: "cpu f32[3]"
          t11 = torch.add(a, b, alpha=1)  # t11: "cpu f32[3]"
          t12 = copy_(t11, a, grad_enabled=True)  # t12: "cpu f32[3]"
          del t12, t11
          t14 = reinplace_mul_(a, t10)  # t14: "cpu f32[3]"
          del t14
          return (t10,)
    """)
    assert reinplace.reports[-1].kept == (("copy_(t11, a)", "add also reads b, which may alias a"),)


# --- functionalization (before the autograd split) ----------------------------------------------------------------
def relu_after_matmul(a, w):
    h = a @ w
    h.relu_()
    return h.sum()


def write_through_slice_then_read_view(x, w):
    y = x * w
    v = y[0]
    y[1:].mul_(2)
    return (y * v).sum()


def no_grad_update(w, x, buf):
    with torch.no_grad():
        w.mul_(0.5)
        buf.add_(1)
    return (w * x).sum()


def first_trace(fn, *args):
    jfn = thunder_ext.jit(fn, executors=["torch"])
    jfn(*args)
    return printed(thunder.last_traces(jfn)[0])


def test_functionalization_replaces_an_inplace_activation_by_its_value():
    expect(first_trace(relu_after_matmul, torch.randn(2, 3, requires_grad=True), torch.randn(3, 2, requires_grad=True)),
           """
        def computation(a, w):
          # a: "cpu f32[2, 3]"
          # w: "cpu f32[3, 2]"
          h = ltorch.matmul(a, w)  # h: "cpu f32[2, 2]"
          t2 = ltorch.relu(h, False)  # t2: "cpu f32[2, 2]"
          t6 = ltorch.sum(t2, None, False, dtype=None)  # t6: "cpu f32[]"
          return (t6,)
    """)


def test_functionalization_scatters_a_slice_write_and_replays_a_stale_view():
    expect(first_trace(write_through_slice_then_read_view, torch.randn(3, 2), torch.randn(3, 2, requires_grad=True)),
           """
        def computation(x, w):
          # x: "cpu f32[3, 2]"
          # w: "cpu f32[3, 2]"
          y = ltorch.mul(x, w)  # y: "cpu f32[3, 2]"
          v = ltorch.getitem(y, 0)  # v: "cpu f32[2]"
          t3 = ltorch.getitem(y, slice(1,None,None))  # t3: "cpu f32[2, 2]"
          t4 = ltorch.mul(t3, 2)  # t4: "cpu f32[2, 2]"
          t11 = prims.pad(t4, 0.0, [(1, 0, 0), (0, 0, 0)])  # t11: "cpu f32[3, 2]"
          t12 = ltorch.full_like(t4, True, device=None, dtype=dtypes.bool8)  # t12: "cpu b8[2, 2]"
          t13 = prims.pad(t12, False, [(1, 0, 0), (0, 0, 0)])  # t13: "cpu b8[3, 2]"
          t14 = ltorch.where(t13, t11, y)  # t14: "cpu f32[3, 2]"
          t16 = ltorch.getitem(t14, 0)  # t16: "cpu f32[2]"
          t7 = ltorch.mul(t14, t16)  # t7: "cpu f32[3, 2]"
          t10 = ltorch.sum(t7, None, False, dtype=None)  # t10: "cpu f32[]"
          return (t10,)
    """)


def test_functionalization_keeps_no_grad_writes_out_of_autograd_and_writes_arguments_back():
    """``w`` (requires grad) keeps its autograd identity through the no-grad write; ``buf`` needs none; both are
    written back at the end (data write-backs: no autograd history moves)."""
    expect(first_trace(no_grad_update, torch.randn(2, requires_grad=True), torch.randn(2), torch.zeros(2)), """
        def computation(w, x, buf):
          # w: "cpu f32[2]"
          # x: "cpu f32[2]"
          # buf: "cpu f32[2]"
          ltorch._set_grad_enabled_with_warning(False)
          t0 = ltorch.mul(w, 0.5)  # t0: "cpu f32[2]"
          t8 = thunder_ext.passes.functionalize.thunder_effects_no_grad_update(w, t0)  # t8: "cpu f32[2]"
          t2 = ltorch.add(buf, 1, alpha=1)  # t2: "cpu f32[2]"
          ltorch._set_grad_enabled_with_warning(True)
          t4 = ltorch.mul(t8, x)  # t4: "cpu f32[2]"
          t7 = ltorch.sum(t4, None, False, dtype=None)  # t7: "cpu f32[]"
          t9 = prims.copy_(t8, w, grad_enabled=False)  # t9: "cpu f32[2]"
          t10 = prims.copy_(t2, buf, grad_enabled=False)  # t10: "cpu f32[2]"
          return (t7,)
    """)
