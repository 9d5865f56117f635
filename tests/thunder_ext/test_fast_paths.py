"""The pipeline's shortcuts give what the long way gives: one compile per torch.compile region, DCE fixpoints,
structural effect memo, flat outputs/argument names without Thunder's pytree, region proxy order."""

from __future__ import annotations

import dis
import random
import traceback
import types

import pytest

pytest.importorskip("thunder")

import torch

import thunder_ext  # applies the import shim; must precede every thunder import

# isort: split
import thunder
from thunder.common import CompileData, CompileStats
from thunder.common import trace as thunder_trace
from thunder.core.compile_data import compile_data_and_stats
from thunder.core import interpreter, transform_common
from thunder.core.trace import tracectx
from thunder.core.transform_common import order_proxies, wrap_return_value_together_with_arguments
from thunder.executors import passes, torch_compile
from thunder.executors.passes import _transform_for_operator_executor_execution
from thunder.executors.torch_compile import torch_compile_ex
from thunder.executors.torchex import ex as pytorch_ex

from thunder_ext.host import names as _thunder, fast as _thunder_fast, fast_fusion
from thunder_ext.declare import binding, resolve
from thunder_ext.declare.adapter import adapt
from thunder_ext.passes import dce, fusion, partition

EXECUTORS = (torch_compile_ex, thunder.extend.get_executor("torch"), thunder.extend.get_executor("python"))


def chain(a, b):
    for _ in range(4):
        a.add_(b)
        c = a * 0.5
        b.mul_(c)
    return a


@pytest.fixture
def effect_compile():
    """Inside a compile-data context, with the effect pipeline installed (Thunder's ``dce`` and
    ``_update_fusion_call_ctx`` are the guarded stand-ins); yields the operator-transformed trace."""
    trc = wrap_return_value_together_with_arguments(thunder_trace()(chain, torch.randn(4), torch.randn(4)))
    cd = CompileData(fn=chain, executors_list=EXECUTORS, disable_preprocessing=True,
                     compile_options={"fusion_type": "dataflow"})
    thunder_ext.install()
    try:
        with compile_data_and_stats(cd, CompileStats()):
            yield _transform_for_operator_executor_execution(trc, EXECUTORS)
    finally:
        thunder_ext.uninstall()


def _walk(bsyms):
    for bsym in bsyms:
        yield bsym
        yield from _walk(bsym.subsymbols)


def test_each_region_is_compiled_once(effect_compile, monkeypatch):
    compiled = []
    original = torch_compile.make_compiled
    monkeypatch.setattr(torch_compile, "make_compiled", lambda *a, **k: compiled.append(a) or original(*a, **k))
    fused = torch_compile_ex.fusion_pass(effect_compile)
    regions = [b for b in fused.bound_symbols if b.sym.is_fusion]
    assert regions and len(compiled) == len(regions)


def test_a_changed_fusion_is_recompiled(effect_compile, monkeypatch):
    fused = torch_compile_ex.fusion_pass(effect_compile)
    region = next(b for b in fused.bound_symbols if b.sym.is_fusion)
    assert passes._update_fusion_call_ctx(region) is region
    compiled = []
    original = torch_compile.make_compiled
    monkeypatch.setattr(torch_compile, "make_compiled", lambda *a, **k: compiled.append(a) or original(*a, **k))
    region.subsymbols = list(region.subsymbols)  # what a pass replacing the member list does
    recompiled = passes._update_fusion_call_ctx(region)
    assert recompiled is not region and len(compiled) == 1
    assert recompiled.sym.name == region.sym.name


def test_dce_of_an_unchanged_result_skips_the_analysis(effect_compile, monkeypatch):
    first = transform_common.dce(effect_compile)
    second = transform_common.dce(first)  # the first pass may convert subsymbol tuples to lists: not a change
    adapted = []
    original = dce.adapted_graph
    monkeypatch.setattr(dce, "adapted_graph", lambda t: adapted.append(t) or original(t))
    third = transform_common.dce(second)
    assert adapted == []
    assert [id(b) for b in third.bound_symbols] == [id(b) for b in second.bound_symbols]
    second.bound_symbols[2].subsymbols = list(second.bound_symbols[2].subsymbols)  # state changed: analyse again
    transform_common.dce(second)
    assert len(adapted) == 1


def test_dce_with_dead_code_is_not_a_fixpoint(effect_compile):
    trace = effect_compile
    product = next(b for b in trace.bound_symbols if b.sym.name == "mul" and not b.sym.name.endswith("_"))
    with tracectx(trace):
        dead = product.from_bsym(output=product.output.replace(name="unused_product"))  # nothing reads it
    trace.bound_symbols.insert(trace.bound_symbols.index(product) + 1, dead)
    result = transform_common.dce(trace)
    assert dead not in result.bound_symbols
    assert _thunder.DCE_FIXPOINT.get(result) is None


def test_structural_memo_matches_the_walk(effect_compile):
    trace = effect_compile
    adapt(trace)  # fills the memo
    fresh = _transform_for_operator_executor_execution(trace, (pytorch_ex,))  # new copies, same structures
    resolver = resolve.resolver_for(None)
    composites = [b for b in fresh.bound_symbols if b.subsymbols]
    assert composites
    for bsym in composites:
        _, memoized = resolver.resolve(bsym)
        operands, _ = binding.operands_of(bsym)
        walked = resolver.from_subsymbols(bsym, operands)
        declared = resolver.declared(bsym)
        expected = resolve._widen_aliases(walked if declared is None else declared | walked,
                                          len(_thunder_fast.proxy_out_names(bsym)))
        assert memoized == expected, bsym


def test_flat_outputs_and_argument_names_match_thunder(effect_compile):
    fresh = _transform_for_operator_executor_execution(effect_compile, (pytorch_ex,))
    for bsym in _walk(fresh.bound_symbols):
        names = _thunder_fast.proxy_arg_names(bsym)
        outs = list(_thunder_fast.flat_outs(bsym))
        assert outs == list(bsym.flat_outs)
        assert names == {p.name for p in bsym.flat_proxy_args}


def test_region_order_matches_order_proxies(effect_compile):
    rng = random.Random(0)
    bsyms = effect_compile.bound_symbols
    full = order_proxies(bsyms)
    names = list(full)
    for _ in range(100):
        wanted = set(rng.sample(names, rng.randint(1, 6)))
        got = _thunder_fast.first_appearance(bsyms, wanted)
        assert sorted(got, key=got.__getitem__) == sorted(wanted, key=full.__getitem__)


def test_thunder_conjunctive_predicates_are_recognised():
    """The merge predicates whose pair answers :func:`partition.fuse_bound_symbols` skips: Thunder's torchcompile
    and CUDA graph ``_should_fuse``, each ``return _can_fuse_node(a) and _can_fuse_node(b)``."""
    import inspect

    from thunder.transforms.cudagraph import CUDAGraphTransform

    assert len(fast_fusion.THUNDER_CONJUNCTIONS) == 2
    for fn in (torch_compile.TorchCompileExecutor.fusion_pass, CUDAGraphTransform.generate_fused_trace):
        assert "return _can_fuse_node(a) and _can_fuse_node(b)" in inspect.getsource(fn)
    assert all(c.co_varnames[:3] == ("a", "b", "_can_fuse_node") for c in fast_fusion.THUNDER_CONJUNCTIONS)
    assert not fast_fusion.is_conjunctive(lambda a, b: True)
    assert fast_fusion.is_conjunctive(fast_fusion.conjunctive(lambda a, b: True))


@pytest.mark.parametrize("strategy", ["consecutive", "dataflow"])
def test_conjunctive_and_pairwise_predicates_give_the_same_groups(effect_compile, strategy):
    """The fast paths (fusible runs without the adapter; a conjunctive predicate asked no pairs; the memoized
    ``can_fuse``) group exactly as asking the unmarked predicate along every edge does."""
    asked = []

    def merge(a, b):
        asked.append((a, b))
        return all(len(n.group_bsyms) > 1 or torch_compile_ex.can_fuse(n.group_bsyms[0]) for n in (a, b))

    def pairwise(a, b):
        return merge(a, b)

    cd = CompileData(fn=chain, executors_list=EXECUTORS, disable_preprocessing=True,
                     compile_options={"fusion_type": strategy})
    with compile_data_and_stats(cd, CompileStats()):
        slow = partition.fuse_bound_symbols(None, effect_compile, pairwise)
        pairs = len(asked)
        asked.clear()
        fast = partition.fuse_bound_symbols(None, effect_compile, fast_fusion.conjunctive(merge))
    assert [[id(b) for b in g] for g in fast] == [[id(b) for b in g] for g in slow]
    assert len(asked) < pairs
    assert all(a is b for a, b in asked)  # a conjunctive predicate is asked about single nodes only
    assert not fast_fusion.can_fuse_memoized()


@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("refuse_copy", [False, True])
def test_memoized_can_fuse_answers_as_thunder_does(effect_compile, monkeypatch, tables, refuse_copy):
    """Under the partition's memo, ``TorchCompileExecutor.can_fuse`` (the last answer, the tables, Thunder's
    ``can_fuse`` walked inline) answers what the stand-in answers without it, for every bound symbol and subsymbol
    and when asked twice in a row — also when a refused symbol (here ``prims.copy_``) is only a subsymbol."""
    from thunder.core.prims import PrimIDs
    from thunder.extend import Executor

    assert fast_fusion._walkable(torch_compile.TorchCompileExecutor)
    if refuse_copy:
        monkeypatch.setattr(fusion, "_torch_autograd_fallbacks", lambda: frozenset({PrimIDs.COPY_}))
        monkeypatch.setattr(fusion, "_refused", (-1, frozenset()))
        fusion._refused_ids()
    fused = torch_compile_ex.fusion_pass(effect_compile)
    bsyms = list(_walk([*effect_compile.bound_symbols, *fused.bound_symbols]))
    want = [fusion._can_fuse(Executor.can_fuse, torch_compile_ex, b) for b in bsyms]
    with fast_fusion.memoizing_can_fuse(tables=tables):
        got = [torch_compile_ex.can_fuse(b) for b in bsyms for _ in range(2)]
    assert got == [w for w in want for _ in range(2)]
    in_place = [w for b, w in zip(bsyms, want, strict=True) if b.sym.name == "add_"]
    assert in_place and all(w is not refuse_copy for w in in_place)  # add_ is add then copy_
    assert any(b.sym.is_fusion for b in bsyms) and True in want


def test_kept_out_writes_are_refused_only_during_the_pass_that_asked():
    """In a joint forward-backward trace the partition keeps writes out of regions, and the executor's ``can_fuse``
    refuses them for the rest of that fusion pass (Thunder fuses a group of one whose member it can fuse). The
    record ends with the pass (its merge predicate): afterwards ``can_fuse`` answers as for any bound symbol, and
    the record holds no bound symbol of the trace."""

    def joint(a, b):
        a.add_(b)
        return {"fw_flat_out": (a * 0.5,)}

    trace = _transform_for_operator_executor_execution(
        thunder_trace()(joint, torch.randn(4), torch.randn(4)), EXECUTORS)
    cd = CompileData(fn=joint, executors_list=EXECUTORS, disable_preprocessing=True)
    thunder_ext.install()
    try:
        with compile_data_and_stats(cd, CompileStats()):
            writer = next(b for b in trace.bound_symbols if b.sym.name == "add_")
            fused = torch_compile_ex.fusion_pass(trace)  # Thunder's pass: its group of one stays unfused
            assert any(b is writer for b in fused.bound_symbols) and partition._kept_out.get() is None


            def merge(a, b):
                return all(len(n.group_bsyms) > 1 or torch_compile_ex.can_fuse(n.group_bsyms[0]) for n in (a, b))

            groups = partition.fuse_bound_symbols(None, trace, fast_fusion.conjunctive(merge))
            assert [writer] in groups
            assert partition.kept_out_ids() == {id(writer)} and not torch_compile_ex.can_fuse(writer)
            del merge  # the pass is over
            assert partition.kept_out_ids() == frozenset() and partition._kept_out.get() is None
            assert torch_compile_ex.can_fuse(writer)
    finally:
        thunder_ext.uninstall()


def _raising(holder, key):
    try:
        return holder[key]
    except KeyError:
        return getattr(holder, "missing", -1)


def test_the_interpreters_dis_decodes_a_code_object_once_as_dis_does():
    decoded = _thunder_fast.DIS_FOR_INTERPRETER
    code = _raising.__code__
    assert decoded.get_instructions(code) == tuple(dis.get_instructions(code))
    assert decoded.get_instructions(code) is decoded.get_instructions(code)  # memoized per code object
    assert decoded._parse_exception_table(code) == dis._parse_exception_table(code)
    assert decoded.Instruction is dis.Instruction and decoded.opmap is dis.opmap
    assert list(decoded.get_instructions(code, show_caches=True)) == list(dis.get_instructions(code, show_caches=True))


def test_a_traceback_frame_is_thunders_and_made_once_per_raise_site():
    code = _raising.__code__
    frame = types.SimpleNamespace(code=code, qualname="Outer._raising",
                                  positions=types.SimpleNamespace(lineno=code.co_firstlineno + 2))
    thunders = interpreter.InterpreterFrame.get_or_make_python_frame(frame)
    ours = _thunder_fast.python_frame(None, frame)

    def described(f):
        c = f.f_code
        return c.co_filename, c.co_firstlineno, c.co_name, c.co_qualname, f.f_lineno, f.f_back.f_back  # a thread's

    assert described(ours) == described(thunders) == (code.co_filename, code.co_firstlineno, "_raising",
                                                       "Outer._raising", code.co_firstlineno + 2, None)
    assert _thunder_fast.python_frame(None, frame) is ours


def test_an_exception_in_the_traced_function_points_at_its_line():
    """Exceptions raised and caught inside the call (a ``KeyError`` handled) trace as eager runs them, on the first
    call and a cache hit; one that escapes shows the user's line in its traceback."""
    jitted = thunder_ext.jit(lambda d, x: x * _raising(d, "k"), executors=["torch"])
    for _ in range(2):
        assert torch.equal(jitted({}, torch.ones(2)), -torch.ones(2))

    def fails(x):
        return x + {}["absent"]

    with pytest.raises(KeyError) as raised:
        thunder_ext.jit(fails, executors=["torch"])(torch.ones(2))
    line = fails.__code__.co_firstlineno + 1
    assert any(entry.name == "fails" and entry.lineno == line for entry in traceback.extract_tb(raised.tb))


def test_a_provenance_record_is_initialized_as_thunders_initializes_it():
    def made(post_init, inst, inputs):
        record = object.__new__(interpreter.ProvenanceRecord)
        record.inst, record.inputs, record.output_idx, record.output_key, record.value = inst, inputs, 0, None, None
        post_init(record)
        return record

    a = interpreter.ProvenanceRecord(interpreter.PseudoInst.CONSTANT, inputs=[], value=1)
    b = interpreter.ProvenanceRecord(interpreter.PseudoInst.CONSTANT, inputs=[], value=2)
    a.ext_flag, b.ext_flag = 6, 3
    thunders = interpreter.ProvenanceRecord.__post_init__
    ours = _thunder_fast._post_init_replacement(thunders)
    for inst, inputs in [(interpreter.PseudoInst.BINARY_SUBSCR, [a, b]), (interpreter.PseudoInst.CONSTANT, []),
                         (interpreter.PseudoInst.LOAD_ATTR, [a])]:
        expected, got = made(thunders, inst, inputs), made(ours, inst, inputs)
        assert (got.inputs, got.ext_flag) == (expected.inputs, expected.ext_flag) and got.inputs is not inputs
    for inst, inputs in [("LOAD_ATTR", []), (interpreter.PseudoInst.CONSTANT, (a,)),
                         (interpreter.PseudoInst.CONSTANT, [1])]:
        with pytest.raises(AssertionError):
            made(thunders, inst, inputs)
        with pytest.raises(AssertionError):
            made(ours, inst, inputs)


def test_the_autograd_bridge_makes_the_same_meta_dummies_and_every_other_randn_is_torchs():
    fast_torch = _thunder_fast.TORCH_FOR_AUTOGRAD
    for kwargs in ({"device": "meta"}, {"device": "meta", "requires_grad": True}):
        made, expected = fast_torch.randn(1, **kwargs), torch.randn(1, **kwargs)
        assert (made.device, made.dtype, made.shape, made.requires_grad) == \
            (expected.device, expected.dtype, expected.shape, expected.requires_grad)
    torch.manual_seed(3)
    drawn = fast_torch.randn(4)
    torch.manual_seed(3)
    torch.testing.assert_close(drawn, torch.randn(4))
    assert fast_torch.Tensor is torch.Tensor and fast_torch.autograd is torch.autograd


def test_a_differentiated_call_and_its_backward_go_through_the_fast_dummies():
    from thunder.executors import torch_autograd

    jfn = thunder_ext.jit(lambda a: (a * 2).sum(), executors=["torch"])
    assert torch_autograd.torch is _thunder_fast.TORCH_FOR_AUTOGRAD  # installed with the compile hook
    a = torch.randn(3, requires_grad=True)
    for _ in range(2):
        jfn(a).backward()
    torch.testing.assert_close(a.grad, torch.full((3,), 4.0))
