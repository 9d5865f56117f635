"""The executor plugin API: declaring effects where executors describe ops, claim-time registration, the
consistency check, and keeping executors honest (check_executor, the CheckEffects debug transform)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("thunder")

import thunder_ext  # noqa: E402  (applies the compat shim before thunder is imported)

import thunder  # noqa: E402
import thunder.torch as ltorch  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from thunder.core import prims  # noqa: E402
from thunder.core.prims import PrimIDs  # noqa: E402
from thunder.core.proxies import TensorProxy  # noqa: E402
from thunder.extend import OperatorExecutor as ThunderExecutor  # noqa: E402

import effects  # noqa: E402
from effects import (  # noqa: E402
    OPAQUE,
    ConflictingDeclarationError,
    DependencyGraph,
    EffectCheckError,
    InvalidDeclaration,
    Lie,
    NonTensorWriteError,
    Sample,
    make_effects,
)
from effects.testing import VOCABULARY, Oracle, programs, schedules  # noqa: E402
from thunder_ext.declare import declarations  # noqa: E402
from thunder_ext.declare.honesty import CheckEffects, check_executor  # noqa: E402
from thunder_ext.declare.declaration_checks import DroppedEffectError  # noqa: E402
from thunder_ext.declare.plugin import (  # noqa: E402
    OperatorExecutor,
    declare_effects,
    register_implementation,
    register_operator,
)
from thunder_ext.declare.resolve import bsym_effects  # noqa: E402

_names = (f"plugin_test_{i}" for i in itertools.count())


@pytest.fixture
def thunder_registry(registry: effects.Registry) -> effects.Registry:
    """An isolated registry that knows Thunder's own symbols (so claims are checked against them)."""
    declarations.register(registry)
    return registry


def new_executor() -> ThunderExecutor:
    return ThunderExecutor(next(_names))


def copy_meta(src: TensorProxy, dst: TensorProxy) -> TensorProxy:
    return TensorProxy(like=dst)


def copy_impl(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    return dst.copy_(src)


def binary_meta(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    return TensorProxy(like=a)


COPY_EFFECTS = make_effects(reads=[0], read_writes=[1], aliases=[(0, 1)])


# --- declaring ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "form",
    [
        {"effects": "my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)"},
        {"effects": torch._C.parse_schema("my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)")},
        {"effects": make_effects(reads=[0], read_writes=[1], aliases=[(0, 1)])},
        {"reads": ["src"], "read_writes": ["dst"], "aliases": [(0, "dst")]},
        {"reads": [0], "read_writes": [1], "aliases": [(0, 1)]},
        {"effects": {"reads": ["src"], "read_writes": ["dst"], "aliases": [(0, "dst")]}},
    ],
    ids=["schema-string", "schema", "Effects", "by-name", "by-position", "mapping"],
)
def test_every_declaration_form_gives_the_same_effects(form: dict[str, Any], registry: effects.Registry) -> None:
    ex = new_executor()
    op = ex.register_operator("my_copy_", meta=copy_meta, fn=copy_impl)
    declared = declare_effects(ex, "my_copy_", registry=registry, **form)
    assert declared.effects == COPY_EFFECTS
    resolution = registry.resolve((op.id, ex.name))
    assert (resolution.origin, resolution.effects) == ("declared", COPY_EFFECTS)
    assert str(resolution.effects) == "read(0:src), read-write(1:dst), out0 aliases 1"
    declared.undo()
    assert registry.resolve((op.id, ex.name)).origin == "unknown"


def test_register_operator_takes_effects_like_thunder_takes_meta(registry: effects.Registry) -> None:
    ex = OperatorExecutor(next(_names), registry=registry)
    op = ex.register_operator("my_copy_", meta=copy_meta, fn=copy_impl,
                              effects="my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)")
    assert ex.opmap["my_copy_"] is op
    assert registry.lookup((op.id, ex.name)) == COPY_EFFECTS


def test_schema_whose_parameters_are_not_the_operators_is_rejected(registry: effects.Registry) -> None:
    ex = new_executor()
    ex.register_operator("my_copy_", meta=copy_meta, fn=copy_impl)
    with pytest.raises(InvalidDeclaration, match=r"\['dst', 'src'\] do not match the operator's parameters "
                                                 r"\['src', 'dst'\]"):
        declare_effects(ex, "my_copy_", "my_copy_(Tensor(a!) dst, Tensor src) -> Tensor(a)", registry=registry)
    assert registry.snapshot() == {}


def test_write_to_a_non_tensor_operand_is_rejected(registry: effects.Registry) -> None:
    def meta(a: TensorProxy, n: int) -> TensorProxy:
        return TensorProxy(like=a)

    ex = new_executor()
    ex.register_operator("bump_", meta=meta, fn=lambda a, n: a.add_(n))
    with pytest.raises(NonTensorWriteError, match="operand 1 \\('n'\\)"):
        declare_effects(ex, "bump_", read_writes=["n"], registry=registry)


def test_declaring_nothing_or_an_unknown_op_is_an_error(registry: effects.Registry) -> None:
    ex = new_executor()
    ex.register_operator("my_copy_", meta=copy_meta, fn=copy_impl)
    with pytest.raises(InvalidDeclaration, match="no effects given"):
        declare_effects(ex, "my_copy_", registry=registry)
    with pytest.raises(LookupError, match="neither owns nor claims prims.add"):
        declare_effects(ex, prims.add, reads=[0], registry=registry)


def test_different_effects_for_the_same_op_conflict(registry: effects.Registry) -> None:
    ex = new_executor()
    ex.register_operator("my_copy_", meta=copy_meta, fn=copy_impl)
    declare_effects(ex, "my_copy_", COPY_EFFECTS, registry=registry)
    with pytest.raises(ConflictingDeclarationError, match="only in old: read-write"):
        declare_effects(ex, "my_copy_", reads=[0, 1], registry=registry)


@torch.library.custom_op("thunder_effects_tests::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, factor: float) -> None:
    x.mul_(factor)


def test_custom_op_with_mutates_args_needs_no_declaration(registry: effects.Registry) -> None:
    def meta(x: TensorProxy, factor: float) -> None:
        return None

    ex = new_executor()
    op = register_operator(ex, "scale_", meta=meta, fn=scale_, registry=registry)
    assert registry.lookup((op.id, ex.name)) == make_effects(read_writes=[0])
    assert check_executor(ex, {"scale_": [(torch.ones(3), 2.0)]}, registry=registry).raise_if_failed().ok


# --- claims and the consistency check -------------------------------------------------------------------------
def claiming_executor(registry: effects.Registry, **impl_effects: Any) -> tuple[OperatorExecutor, Any]:
    ex = OperatorExecutor(next(_names), registry=registry)
    op = ex.register_operator("my_prims_copy_", like=prims.copy_,
                              fn=lambda copy_from, copy_to, *, grad_enabled: copy_to.copy_(copy_from))
    ex.register_implementation(prims.copy_, op, **impl_effects)
    return ex, op


def test_claim_records_the_implementations_effects(thunder_registry: effects.Registry) -> None:
    ex, op = claiming_executor(thunder_registry, effects=make_effects(reads=[0], writes=[1], aliases=[(0, 1)]))
    expected = make_effects(reads=[0], writes=[1], aliases=[(0, 1)])
    assert thunder_registry.lookup((PrimIDs.COPY_, ex.name)) == expected  # the claim
    assert thunder_registry.lookup((op.id, ex.name)) == expected  # what the adapter sees in the execution trace
    assert thunder_registry.resolve((op.id, ex.name)).source == f"executor {ex.name!r}"


def test_implementation_may_add_effects(thunder_registry: effects.Registry) -> None:
    workspace = make_effects(read_writes=[0, 1], aliases=[(0, 1)])  # e.g. also scribbles on its source
    ex, op = claiming_executor(thunder_registry, effects=workspace)
    assert thunder_registry.lookup((op.id, ex.name)) == workspace


def test_claim_without_effects_uses_the_operators_declaration(thunder_registry: effects.Registry) -> None:
    ex = OperatorExecutor(next(_names), registry=thunder_registry)
    op = ex.register_operator("my_index_copy_", like=ltorch.index_copy_,
                              fn=lambda a, dim, index, source: a.index_copy_(dim, index, source),
                              effects={"read_writes": ["a"], "aliases": [(0, "a")]})
    ex.register_implementation(ltorch.index_copy_, op)
    assert thunder_registry.lookup((ltorch.index_copy_.id, ex.name)) == make_effects(read_writes=[0],
                                                                                      aliases=[(0, 0)])


@pytest.mark.parametrize(
    ("impl_effects", "missing"),
    [
        (make_effects(reads=[0, 1], aliases=[(0, 1)]), r"write\(1:copy_to\) \(the implementation does not write it\)"),
        (make_effects(reads=[0], writes=[1]), r"out0 aliases 1\."),
    ],
    ids=["dropped-write", "dropped-alias"],
)
def test_implementation_that_drops_an_effect_is_rejected(
    thunder_registry: effects.Registry, impl_effects: effects.Effects, missing: str
) -> None:
    before = thunder_registry.snapshot()
    with pytest.raises(DroppedEffectError, match=r"(?s)executor 'plugin_test_\d+' implements prims.copy_ but its "
                                                 rf"declared effects drop.*{missing}.*must cover the symbol's"):
        claiming_executor(thunder_registry, effects=impl_effects)
    after = thunder_registry.snapshot()
    assert {k: v for k, v in after.items() if k not in before} == {}, "a rejected claim must declare nothing"


def test_blind_write_where_the_symbol_reads_is_rejected_and_the_claim_withdrawn(
    thunder_registry: effects.Registry,
) -> None:
    ex = new_executor()
    op = ex.register_operator("my_index_copy_", like=ltorch.index_copy_,
                              fn=lambda a, dim, index, source: a.index_copy_(dim, index, source))
    with pytest.raises(DroppedEffectError, match=r"torch.Tensor.index_copy_ .*read-write\(0:a\) \(the "
                                                 r"implementation declares a pure write, which drops the read\)"):
        register_implementation(ex, ltorch.index_copy_, op, effects={"writes": ["a"], "aliases": [(0, "a")]},
                                registry=thunder_registry)
    assert ltorch.index_copy_.id not in ex.implmap


# --- keeping executors honest ---------------------------------------------------------------------------------
def _liar(lie: Lie) -> tuple[Callable[..., Any], dict[str, Any]]:
    """One op per kind of lie: (kernel, declared operand lists)."""
    match lie:
        case Lie.UNDECLARED_WRITE:
            return (lambda a, b: a.add_(b)), {"aliases": [(0, "a")]}
        case Lie.MISSING_WRITE:
            return (lambda a, b: a + b), {"read_writes": ["b"]}
        case Lie.BLIND_WRITE_READS:
            return (lambda a, b: a.add_(b)), {"writes": ["a"], "aliases": [(0, "a")]}
        case Lie.UNDECLARED_ALIAS:
            return (lambda a, b: a.view(-1)), {"reads": ["a"]}
        case Lie.MISSING_ALIAS:
            return (lambda a, b: a + b), {"aliases": [(0, "b")]}
        case Lie.UNDECLARED_RNG:
            return (lambda a, b: a + torch.rand_like(b)), {"reads": ["a"]}
        case _:
            raise AssertionError(lie)


@pytest.mark.parametrize("lie", list(Lie), ids=lambda lie: lie.name)
def test_check_executor_catches_each_kind_of_lie(lie: Lie, registry: effects.Registry) -> None:
    kernel, declared = _liar(lie)
    ex = new_executor()
    register_operator(ex, "liar", meta=binary_meta, fn=kernel, effects=declared, registry=registry)
    ex.register_operator("honest_add", meta=binary_meta, fn=lambda a, b: a + b)
    declare_effects(ex, "honest_add", effects.PURE, registry=registry)
    samples = [(torch.arange(4.0), torch.ones(4)), (torch.zeros(2, 2), torch.full((2, 2), 3.0))]
    report = check_executor(ex, {"liar": samples, "honest_add": samples}, registry=registry)
    by_op = {r.op: r for r in report.reports}
    assert by_op["honest_add"].ok
    assert lie in {f.kind for f in by_op["liar"].findings}
    with pytest.raises(EffectCheckError, match=rf"(?s)executor '{ex.name}'.*liar: .*{lie.value}"):
        report.raise_if_failed()


def test_check_executor_runs_claimed_implementations_and_lists_the_rest(thunder_registry: effects.Registry) -> None:
    ex, op = claiming_executor(thunder_registry, effects=make_effects(reads=[0], writes=[1], aliases=[(0, 1)]))
    ex.register_operator("mystery_", meta=binary_meta, fn=lambda a, b: a.mul_(b))
    ex.register_operator("unsampled", meta=binary_meta, fn=lambda a, b: a + b)
    declare_effects(ex, "unsampled", effects.PURE, registry=thunder_registry)
    report = check_executor(
        ex,
        {prims.copy_: [Sample((torch.ones(3), torch.zeros(3)), {"grad_enabled": False})],
         "mystery_": [(torch.ones(2), torch.full((2,), 2.0))]},
        registry=thunder_registry,
    )
    assert report.ok and report.unchecked == ("unsampled",) and report.undeclared == ("mystery_",)
    mystery = next(r for r in report.reports if r.op == "mystery_")
    assert mystery.declared == OPAQUE and str(mystery.observed) == "read-write(0:a), out0 aliases 0"
    with pytest.raises(LookupError, match="has no operator for it"):
        check_executor(ex, {ltorch.add: [()]}, registry=thunder_registry)


def _index_copy_executor(registry: effects.Registry, kernel: Callable[..., Any]) -> OperatorExecutor:
    ex = OperatorExecutor(next(_names), registry=registry)
    op = ex.register_operator("my_index_copy_", like=ltorch.index_copy_, fn=kernel)
    ex.register_implementation(ltorch.index_copy_, op, effects={"read_writes": ["a"], "aliases": [(0, "a")]})
    return ex


def _index_copy_model(x: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    x.index_copy_(0, index, source)
    return x * source.sum()


def test_debug_mode_checks_every_call_of_a_jitted_function(thunder_registry: effects.Registry) -> None:
    honest = _index_copy_executor(thunder_registry, lambda a, dim, index, source: a.index_copy_(dim, index, source))
    jitted = thunder.jit(_index_copy_model, executors=[honest], transforms=[CheckEffects(thunder_registry)])
    x, index, source = torch.zeros(4), torch.tensor([0, 2]), torch.ones(2)
    expected_x = x.clone()
    expected = _index_copy_model(expected_x, index, source.clone())
    for _ in range(2):
        torch.testing.assert_close(jitted(x, index, source), expected)
    torch.testing.assert_close(x, expected_x)
    assert "my_index_copy_" in str(thunder.last_traces(jitted)[-1])

    def scribbling(a: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        source.data.mul_(-1)  # a kernel reusing its input as scratch space, without saying so
        return a.index_copy_(dim, index, source)

    liar = _index_copy_executor(thunder_registry, scribbling)
    jitted = thunder.jit(_index_copy_model, executors=[liar], transforms=[CheckEffects(thunder_registry)])
    with pytest.raises(EffectCheckError, match=r"(?s)my_index_copy_ \(executor 'plugin_test_\d+'\).*undeclared "
                                               r"write: operand 3 \('source'\)"):
        jitted(torch.zeros(4), index, torch.ones(2))


# --- the graph side -------------------------------------------------------------------------------------------
def test_undeclared_op_of_another_executor_is_opaque(registry: effects.Registry) -> None:
    other = new_executor()
    sneaky = other.register_operator("sneaky_scale_", meta=binary_meta, fn=lambda a, b: a.mul_(b))
    trace = thunder.trace()(lambda a, b: sneaky(a, b), torch.ones(2), torch.ones(2))
    bsym = next(b for b in trace.bound_symbols if b.sym is sneaky)
    assert bsym_effects(bsym, registry) == OPAQUE
    declare_effects(other, sneaky, read_writes=["a"], aliases=[(0, "a")], registry=registry)
    assert bsym_effects(bsym, registry) == make_effects(read_writes=[0], aliases=[(0, 0)])


_CLAIMED = {torch.ops.aten.copy_.default: ltorch.copy_, torch.ops.aten.index_copy_.default: ltorch.index_copy_}


def _fuzz_executor(registry: effects.Registry) -> OperatorExecutor:
    ex = OperatorExecutor("plugin_fuzz", registry=registry)
    copy = ex.register_operator("fuzz_copy_", like=ltorch.copy_, fn=lambda a, b: a.copy_(b))
    index_copy = ex.register_operator("fuzz_index_copy_", like=ltorch.index_copy_,
                                      fn=lambda a, dim, index, source: a.index_copy_(dim, index, source))
    ex.register_implementation(ltorch.copy_, copy, effects="fuzz_copy_(Tensor(a!) a, Tensor b) -> Tensor(a)")
    ex.register_implementation(ltorch.index_copy_, index_copy, effects={"read_writes": ["a"], "aliases": [(0, "a")]})
    return ex


_FUZZ_OPS = [op for op in VOCABULARY if op.name in ("add", "mul", "clone", "view", "t", "slice", "add_", "copy_",
                                                      "index_copy_", "sum")]


@given(data=st.data(), case=programs(ops=_FUZZ_OPS, max_instructions=10))
def test_declared_executor_ops_are_ordered_correctly(data: st.DataObject, case: Any) -> None:
    """Programs whose copy_/index_copy_ run on the executor's kernels, ordered by the executor's declared effects
    (not the aten schemas): every schedule the graph allows gives the eager result."""
    registry = effects.Registry()
    declarations.register(registry)
    ex = _fuzz_executor(registry)

    def executor_effects(inst: effects.Instruction) -> effects.Effects:
        claimed = _CLAIMED.get(inst.op)
        if claimed is None:
            return inst.effects if inst.effects is not None else registry.lookup(inst.op)
        return registry.lookup((ex.implmap[claimed.id].symbol.id, ex.name))

    graph = DependencyGraph.build(case.program, effects_of=executor_effects)
    Oracle(case).check_order(data.draw(schedules(graph, returns=True), label="order"))


# --- through thunder_ext.jit ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
def test_undeclared_mutating_op_of_another_executor_stays_correct(fusion_type: str) -> None:
    other = new_executor()
    sneaky = other.register_operator("sneaky_mul_", meta=binary_meta, fn=lambda a, b: a.mul_(b))

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        before = a * 2
        sneaky(a, b)  # writes a; its result is unused and nobody declared anything
        return before + a

    a, b = torch.ones(3), torch.full((3,), 3.0)
    expected_a = a.clone()
    expected = (expected_a * 2) + expected_a.mul_(b)
    out = thunder_ext.jit(f, executors=[other, "torchcompile"], fusion_type=fusion_type)(a, b)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, expected_a)


@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
def test_declared_executor_op_is_ordered_in_a_jitted_program(fusion_type: str) -> None:
    ex = new_executor()
    op = ex.register_operator("vendor_index_copy_", like=ltorch.index_copy_,
                              fn=lambda a, dim, index, source: a.index_copy_(dim, index, source))
    ex.register_implementation(ltorch.index_copy_, op)

    def f(x: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        before = x.sin()  # read before the write (WAR)
        x.index_copy_(0, index, source)
        return before + x.cos()  # read after it (RAW)

    x, index, source = torch.arange(4.0), torch.tensor([3, 1]), torch.ones(2)
    expected_x = x.clone()
    expected = f(expected_x, index, source)
    with declare_effects(ex, ltorch.index_copy_, read_writes=["a"], aliases=[(0, "a")]):
        jitted = thunder_ext.jit(f, executors=[ex, "torchcompile"], fusion_type=fusion_type)
        torch.testing.assert_close(jitted(x, index, source), expected)
    torch.testing.assert_close(x, expected_x)
    assert "vendor_index_copy_" in str(thunder.last_traces(jitted)[-1])
