"""Declarations of Thunder symbols: keys, explicit table, schema derivation, coverage."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import effects  # noqa: E402
from effects import Access  # noqa: E402

import thunder_ext  # noqa: E402
import thunder.torch as ltorch  # noqa: E402
from thunder.core import prims  # noqa: E402
from thunder.core.prims import PrimIDs  # noqa: E402
from thunder.executors import torchex  # noqa: E402
from thunder_ext.declare import declarations, keys  # noqa: E402


def lookup(key):
    return effects.default_registry().resolve(key)


def test_import_declares_into_default_registry_with_source():
    res = lookup(PrimIDs.COPY_)
    assert res.origin == "declared" and res.source == "thunder_ext"


def test_keys_follow_the_convention():
    assert keys.key_of(ltorch.add_) == "torch.Tensor.add_"
    assert keys.key_of(prims.copy_) is PrimIDs.COPY_
    assert keys.impl_key(torchex.copy_) == ("copy_", "torch")
    assert keys.impl_key(ltorch.add_) is None
    assert keys.impl_key(ltorch.add_, torchex.ex) == ("torch.Tensor.add_", "torch")
    assert keys.impl_key("copy_", torchex.ex) == ("copy_", "torch")


def test_copy_prim_reads_source_and_blindly_writes_destination():
    eff = lookup(PrimIDs.COPY_).effects
    assert eff.access(0) is Access.READ
    assert eff.access(1) is Access.WRITE
    assert {(a.output, a.operand) for a in eff.aliases} == {(0, 1)}


def test_torch_executor_copy_has_the_prim_effects():
    assert lookup(("copy_", "torch")).effects == lookup(PrimIDs.COPY_).effects


def test_inplace_symbols_write_their_first_argument():
    for sym in (ltorch.add_, ltorch.mul_, ltorch.index_copy_, ltorch.setitem_):
        assert lookup(keys.key_of(sym)).effects.access(0) is Access.READ_WRITE, sym.id


def test_batch_norm_declares_running_statistics_written():
    eff = lookup(ltorch.batch_norm.id).effects
    sig = keys.signature_of(ltorch.batch_norm)
    assert eff.written == {sig.position("running_mean"), sig.position("running_var")}


def test_rng_and_print_are_ordered_resources():
    assert lookup(PrimIDs.UNIFORM).effects.ordered_resources
    assert effects.IO in lookup(PrimIDs.PRINT).effects.ordered_resources
    assert lookup(ltorch.exponential_.id).effects.ordered_resources


def test_views_alias_their_base():
    for sym in (ltorch.view, ltorch.t, ltorch.transpose, ltorch.reshape):
        assert any(a.operand == 0 for a in lookup(sym.id).effects.aliases), sym.id
    assert any(a.operand == 0 for a in lookup(PrimIDs.TRANSPOSE).effects.aliases)


def test_schema_derived_pure_op():
    assert declarations.category_of(ltorch.mul.id) == "schema-derived"
    assert lookup(ltorch.mul.id).effects.is_pure


def test_auto_registered_functions_without_a_schema_follow_thunders_contract():
    """out-of-place (``F.multi_head_attention_forward``); a ``Tensor`` method's result may be ``self``; a function
    with an ``inplace`` argument writes when the call says so: opaque"""
    assert lookup("torch.nn.functional.multi_head_attention_forward").effects.is_pure
    assert lookup("Tensor.cfloat").effects.aliases and not lookup("Tensor.cfloat").effects.written
    assert lookup("torch.nn.functional.dropout1d").effects.opaque


def test_unknown_executor_symbol_is_opaque():
    assert lookup(("my_kernel", "some_executor")).effects.opaque


def test_coverage_counts_every_known_symbol():
    cov = thunder_ext.coverage()
    assert cov.declared >= len(PrimIDs)
    assert cov.schema_derived > 500
    assert cov.total == cov.declared + cov.schema_derived + cov.subsymbols + cov.opaque
    assert len(cov.opaque_keys) == cov.opaque
    assert "schema-derived" in cov.table()


def test_register_into_isolated_registry_is_undoable(registry):
    handles = declarations.register(registry)
    assert registry.resolve(PrimIDs.COPY_).origin == "declared"
    for h in handles:
        h.undo()
    assert registry.resolve(PrimIDs.COPY_).origin == "unknown"
