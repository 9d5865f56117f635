"""Thunder trace -> neutral program: values, operands, effects (incl. bottom-up composites and fusions)."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402, F401 - before thunder (the import shim)
import thunder  # noqa: E402
from effects import Access, DependencyGraph, operand_values, region_effects  # noqa: E402
from thunder_ext.declare import adapter, binding, resolve  # noqa: E402


def first_and_last(fn, *args, **jit_kwargs):
    jfn = thunder.jit(fn, skip_inplace_alias_updates=True, **jit_kwargs)
    jfn(*args)
    traces = thunder.last_traces(jfn)
    return traces[0], traces[-1]


def effects_by_op(program):
    return {str(inst.op): inst.effects for inst in program.instructions}


def test_inputs_returns_and_inplace_write():
    def f(a):
        b = a * 2
        a.add_(1)
        return b

    first, _ = first_and_last(f, torch.ones(3))
    program = adapter.adapt(first).program.check()
    assert program.inputs == ("a",)
    assert len(program.returns) == 1
    eff = effects_by_op(program)["torch.Tensor.add_"]
    assert eff.access(0) is Access.READ_WRITE


def test_batch_norm_running_stats_written():
    def f(x, rm, rv):
        return torch.nn.functional.batch_norm(x, rm, rv, training=True)

    first, _ = first_and_last(f, torch.randn(4, 3), torch.zeros(3), torch.ones(3))
    inst = next(i for i in adapter.adapt(first).program.instructions if "batch_norm" in str(i.op))
    assert inst.effects.written == {1, 2}


def test_fusion_region_carries_member_effects():
    def f(a):
        a.mul_(2)
        return a * 3

    _, last = first_and_last(f, torch.ones(3), executors=["torchcompile"])
    fused = [i for i in adapter.adapt(last).program.instructions if str(i.op).startswith("TorchCompile")]
    assert fused and any(i.effects.written for i in fused)


def test_composite_write_through_inner_view_reaches_the_argument():
    def f(a):
        a.t().add_(1)
        return a

    first, _ = first_and_last(f, torch.ones(2, 2))
    program = adapter.adapt(first).program
    # the view and the write are separate top-level instructions: the view aliases, the write writes
    ops = effects_by_op(program)
    assert any(a.operand == 0 for a in ops["torch.t"].aliases)
    assert ops["torch.Tensor.add_"].access(0) is Access.READ_WRITE


def test_input_aliases_are_passed_through():
    def f(x, y):
        return x + y

    first, _ = first_and_last(f, torch.ones(2), torch.ones(2))
    program = adapter.adapt(first, input_aliases=[("x", "y")]).program.check()
    assert program.input_aliases == (frozenset({"x", "y"}),)


def test_unknown_symbol_without_subsymbols_is_opaque():
    from thunder.core.symbol import Symbol

    sym = Symbol(name="mystery", meta=lambda x: x, is_prim=True, id="tests.mystery")
    from thunder.core.trace import TraceCtx, tracectx
    from thunder.core.proxies import TensorProxy

    with tracectx(TraceCtx()):
        x = TensorProxy(shape=(2,), device=thunder.devices.cpu, dtype=thunder.dtypes.float32, requires_grad=False)
        bsym = sym.bind(x, output=x)
    assert resolve.bsym_effects(bsym).opaque


def _walk(bsyms):
    for bsym in bsyms:
        yield bsym
        yield from _walk(bsym.subsymbols)


def test_a_composite_has_the_effects_its_decomposition_has_as_one_region():
    """The adapter's composites and the partitioner's regions are one question with one answer
    (:func:`effects.compose`): the effects of a composite on each of its operands are those the partitioner
    composes for its subsymbols fused into one region."""

    def f(x, rm, rv, w):
        y = torch.nn.functional.batch_norm(x, rm, rv, training=True)
        w.t().add_(1)
        x.index_copy_(0, torch.tensor([1]), y[:1])
        return torch.split(y, 2)[0] * w[0]

    first, last = first_and_last(f, torch.randn(4, 3), torch.zeros(3), torch.ones(3), torch.ones(3, 3),
                                 executors=["torch"])
    resolver = resolve.resolver_for(None)
    compared = 0
    for bsym in _walk([*first.bound_symbols, *last.bound_symbols]):
        if not bsym.subsymbols:
            continue
        operands, _ = binding.operands_of(bsym)
        composite = resolver.from_subsymbols(bsym, operands)
        graph = DependencyGraph.build(adapter.adapt_bsyms(bsym.subsymbols).program)
        region, inputs, _ = region_effects(graph, range(graph.n))
        assert composite.opaque == region.opaque, bsym
        for k, value in enumerate(inputs):
            positions = [p for p, op in enumerate(operands) if value in operand_values(op)]
            if len(positions) == 1 and operand_values(operands[positions[0]]) == (value,):
                assert composite.access(positions[0]) == region.access(k), (bsym.sym.name, value)
                compared += 1
    assert compared > 20, compared


def test_a_symbol_handing_back_a_defined_value_gets_a_fresh_renamed_view_each_adaptation():
    """The instruction kept on a bound symbol (``_Resolved.adapted``) is used only where none of its outputs is
    defined yet; otherwise the output is renamed and declared a view of the operand it repeats, every time."""

    def f(a):
        return a * 2

    first, _ = first_and_last(f, torch.ones(3))
    mul = next(b for b in first.bound_symbols if b.subsymbols or b.sym.name == "mul")
    (out,) = mul.flat_proxy_outs
    (arg,) = mul.flat_proxy_args
    plain = adapter.adapt_bsyms([mul], args=[arg]).program.instructions[0]
    assert plain.outputs == (out.name,) and not plain.effects.aliases
    # the same bound symbol where its output is already a program input: renamed (fresh: it repeats no operand)
    clash = adapter.adapt_bsyms([mul], args=[arg, out]).program.check().instructions[0]
    assert clash.outputs == (f"{out.name}@0.0",)
    assert clash is not plain
    again = adapter.adapt_bsyms([mul], args=[arg]).program.instructions[0]
    assert again is plain  # immutable: the adaptations of one compilation share it
    # a bound symbol whose output is its own operand: a fresh value declared a view of that operand, every time
    with thunder.core.trace.tracectx(first):
        echo = mul.from_bsym(output=arg)
    for _ in range(2):
        inst = adapter.adapt_bsyms([echo], args=[arg]).program.check().instructions[0]
        assert inst.outputs == (f"{arg.name}@0.0",)
        assert any(a.output == 0 and a.operand == 0 for a in inst.effects.aliases)
