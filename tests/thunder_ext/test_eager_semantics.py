"""Issue 12: where eager raises or rounds, the compiled program must too.

Every program of the catalog (:data:`thunder_ext.testing.eager_semantics.PROGRAMS`: the issue's programs and variants of
each of its six classes — in-place result types, partial overlap, seeding, module attribute rebinding,
low-precision reads after writes, ops that failed to trace) runs eagerly and through ``thunder_ext.jit`` on fresh,
identical inputs, call after call (the first compiles, later ones hit the cache):

* where eager raises, ``pytest.raises`` with eager's exception type (and eager is checked to raise exactly the type
  the catalog says);
* where it does not, every returned value, every argument after the call, the gradients after ``.backward()``
  (programs with ``grad=True``: training steps, ``out=`` calls, module state), the module's state on the original
  module (``requires_grad`` included) and the default generator's state after the call must be eager's;
* a documented limitation is a typed error (``refused``), never a wrong value.

Cells: the torch executor for every program (its fusion type does nothing: there is no fusion); the torchcompile
executor under one fusion type per program, one program per class in the default run and the others ``slow``
(``EFFECTS_SLOW=1``), the fusion types alternating within each class. The README's reliability table is
``benchmarks/eager_semantics.py`` over the same catalog, with stock ``thunder.jit`` beside.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("thunder")

import thunder  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.testing.catalog import CLASSES, Program  # noqa: E402
from thunder_ext.testing.eager_semantics import FUSION_TYPES, PROGRAMS, difference, executors_of, observe  # noqa: E402
from thunder_ext.declare import opaque_torch  # noqa: E402
from thunder_ext.passes import fusion  # noqa: E402
from thunder_ext.python_state import rebinding  # noqa: E402
from thunder_ext.eager import seeding  # noqa: E402

REFUSED: dict[str, type[BaseException]] = {
    "seeding/seed_under_grad": seeding.SeedUnderAutogradError,
    "untraceable/data_assignment_under_grad": rebinding.MetadataUnderAutogradError,
    "untraceable/t_under_grad": rebinding.MetadataUnderAutogradError,
    "untraceable/index_add_alpha_under_grad": opaque_torch.OpaqueUnderAutogradError,
}
"""The typed error of each program ``thunder_ext`` refuses (the catalog says ``NotImplementedError``)."""

SLOW_ON_TORCH = {"untraceable/batch_norm_cumulative_training", "module_state/nested_counters",
                 "module_state/growing_history", "module_state/running_mean_training", "result_type/copy_converts"}
"""Torch-executor cells of a few seconds each on two cores (their class keeps cheaper programs in the default run)."""

TORCHCOMPILE_DEFAULT = {"result_type/int_add_float", "overlap/out_partial", "seeding/manual_seed_randn",
                        "module_state/counter_attribute", "module_members/parameters_by_position",
                        "low_precision/bf16_write_then_read",
                        "untraceable/out_add"}
"""torchcompile cells (dataflow fusion) in the default run: one per class."""


def _module(fn: Any) -> nn.Module | None:
    return fn if isinstance(fn, nn.Module) else None


def _call(fn: Any, program: Program, k: int) -> None:
    """Call ``k`` of ``program`` (and its ``.backward()``), letting any exception through."""
    args = program.make(k)
    torch.manual_seed(1000 + k)
    out = fn(*args)
    if program.grad:
        values = out if isinstance(out, (tuple, list)) else (out,)
        terms = [v.float().sum() for v in values if isinstance(v, torch.Tensor) and v.requires_grad]
        if terms:
            sum(terms[1:], terms[0]).backward()


def check(program: Program, executor: str, fusion_type: str) -> None:
    """``program`` through ``thunder_ext.jit`` behaves as eager on every call (see the module docstring)."""
    eager_fn, compiled_fn = program.build(), program.build()
    jitted = thunder_ext.jit(compiled_fn, executors=executors_of(executor), fusion_type=fusion_type)
    refused = REFUSED.get(program.id)
    computed = 0
    for k in range(program.calls):
        eager = observe(eager_fn, program, k, _module(eager_fn))
        expected = program.eager_raises(k)
        if expected is not None:
            assert type(eager.error) is expected, f"call {k}: eager raised {eager.error!r}, not {expected.__name__}"
            with pytest.raises(expected) as caught:
                _call(jitted, program, k)
            assert type(caught.value) is expected, f"call {k}: {caught.value!r}"
            continue
        assert eager.error is None, f"call {k}: eager raised {eager.error!r}"
        if refused is not None:
            with pytest.raises(refused):
                _call(jitted, program, k)
            continue
        compiled = observe(jitted, program, k, _module(compiled_fn))
        if compiled.error is not None:
            raise compiled.error
        found = difference(eager.state, compiled.state, **program.tolerance)
        assert found is None, f"call {k}: {found}"
        computed += 1
    if program.cache_hit and computed == program.calls:
        assert thunder.cache_hits(jitted) == program.calls - 1, "later calls recompiled"


TORCH_CELLS = [pytest.param(p, id=p.id, marks=[pytest.mark.slow] if p.id in SLOW_ON_TORCH else [])
               for p in PROGRAMS]


def _torchcompile_cells() -> list:
    """Each program under one fusion type: the default programs under dataflow (run by default), the others
    alternating within their class (both fusion types meet every class; both for every program repeated ~60
    compilations), ``slow``."""
    cells, seen = [], dict.fromkeys(CLASSES, 0)
    for p in PROGRAMS:
        default = p.id in TORCHCOMPILE_DEFAULT
        fusion_type = "dataflow" if default else FUSION_TYPES[seen[p.cls] % 2]
        seen[p.cls] += not default
        cells.append(pytest.param(p, fusion_type, id=f"{p.id}-{fusion_type}",
                                  marks=[] if default else [pytest.mark.slow]))
    return cells


TORCHCOMPILE_CELLS = _torchcompile_cells()


@pytest.mark.parametrize("program", TORCH_CELLS)
def test_torch_executor(program: Program) -> None:
    check(program, "torch", "dataflow")


@pytest.mark.parametrize("program,fusion_type", TORCHCOMPILE_CELLS)
def test_torchcompile_executor(program: Program, fusion_type: str) -> None:
    check(program, "torchcompile", fusion_type)


# --- the catalog and the mechanisms behind it ---------------------------------------------------------------------
def test_catalog_covers_every_class_of_the_issue() -> None:
    """Each class has the issue's programs and at least three variants of its own; every raising program says
    what eager raises, every refusal has its typed error."""
    for cls in CLASSES:
        programs = [p for p in PROGRAMS if p.cls == cls]
        assert any(p.issue for p in programs), cls
        assert sum(not p.issue for p in programs) >= 3, cls
        assert any(p.grad for p in programs) or cls == "seeding", f"{cls}: no program with .backward()"
    assert {p.id for p in PROGRAMS if p.refused is not None} == set(REFUSED)
    assert len({p.id for p in PROGRAMS}) == len(PROGRAMS)
    assert TORCHCOMPILE_DEFAULT <= {p.id for p in PROGRAMS} and SLOW_ON_TORCH <= {p.id for p in PROGRAMS}


def test_partial_overlap_of_views_made_inside_is_guarded_by_layout() -> None:
    """An entry compiled for a strided argument (eager cannot tell the overlap: no error) does not run for a
    contiguous one (eager raises): the prologue checks the argument's strides, the call compiles again and raises."""
    def f(x):
        x[0:3].add_(x[1:4])
        return x

    jf = thunder_ext.jit(f)
    strided, eager = torch.arange(16.0)[::2], torch.arange(16.0)[::2]
    f(eager)
    jf(strided)
    assert torch.equal(strided, eager)
    with pytest.raises(RuntimeError, match="single memory location"):
        jf(torch.arange(8.0))
    jf(torch.arange(16.0)[::2])
    assert thunder.cache_hits(jf) == 1


def test_random_regions_compile_with_eager_random_numbers() -> None:
    """Only torchcompile regions whose members draw random numbers are compiled with ``fallback_random``."""
    def draws(x):
        return torch.randn_like(x) + x

    def computes(x):
        return x * 2 + 1

    for fn, random in ((draws, True), (computes, False)):
        jf = thunder_ext.jit(fn, executors=["torchcompile"])
        jf(torch.zeros(4))
        fused = [b for b in thunder.last_traces(jf)[-1].bound_symbols if b.sym.is_fusion]
        assert fused and all(fusion.draws_random_numbers(b.subsymbols) is random for b in fused)
