"""Schema-derived effects (:mod:`effects.schema`) against PyTorch's own alias annotations.

The exhaustive test recomputes the expected writes and aliases of every registered schema *independently* of the
implementation: argument annotations and tensor-ness come from the JIT type objects (``alias_info``,
``TensorType``/``ListType``/``OptionalType``), return annotations from ``torchgen``'s schema grammar (which, unlike
``torch._C``, keeps the element annotation of ``Tensor(a)[]`` returns).
"""

from __future__ import annotations

import torch
from torchgen.model import parse_returns

import effects
from effects import Access, Alias, ResourceEffect
from effects.schema import RNG_DEFAULT, derive, from_schema

aten = torch.ops.aten


# --- independent oracle ------------------------------------------------------------------------------------------
def _is_tensorish(type_: torch._C.JitType) -> bool:
    """Tensor, Tensor?, Tensor[], Tensor?[] (any nesting of Optional/List around a Tensor), from the type object."""
    while type_.kind() in ("OptionalType", "ListType"):
        type_ = type_.getElementType()
    return type_.kind() == "TensorType"


def _return_sets(schema: torch._C.FunctionSchema) -> list[set[str]] | None:
    """Alias sets of each return via torchgen's grammar; ``None`` where torchgen cannot parse the returns."""
    text = str(schema)
    try:
        returns = parse_returns(text[text.rindex(" -> ") + 4:])
    except Exception:  # noqa: BLE001 - TorchScript-only types (Any, t, Dict, ...) are outside torchgen's grammar
        return None
    return [set(r.annotation.alias_set) if r.annotation is not None else set() for r in returns]


def _expected(schema: torch._C.FunctionSchema) -> tuple[frozenset[int], frozenset[tuple[int, int]], bool]:
    """(written tensor positions, (output, operand) alias pairs, writes a non-tensor) from the schema alone."""
    args = list(schema.arguments)
    writes = frozenset(i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write
                       and _is_tensorish(a.type))
    non_tensor_write = any(a.alias_info is not None and a.alias_info.is_write and not _is_tensorish(a.type)
                           for a in args)
    ret_sets = _return_sets(schema)
    if ret_sets is None:  # fall back to torch._C's own annotations (exact for non-list returns)
        ret_sets = [set(r.alias_info.before_set) if r.alias_info is not None else set() for r in schema.returns]
    aliases = set()
    for j, sets in enumerate(ret_sets):
        for i, a in enumerate(args):
            if a.alias_info is not None and _is_tensorish(a.type) and sets & (set(a.alias_info.before_set) - {"*"}):
                aliases.add((j, i))
    return writes, frozenset(aliases), non_tensor_write


def test_every_registered_schema_matches_its_alias_annotations() -> None:
    schemas = torch._C._jit_get_all_schemas()
    assert len(schemas) > 2000
    mismatches = []
    for schema in schemas:
        derived, signature = from_schema(schema)
        writes, aliases, non_tensor_write = _expected(schema)
        if non_tensor_write:
            # A write we cannot express (Generator(a!), Dict(...)(a!), t[](a!)) must never look pure.
            if not derived.opaque:
                mismatches.append(f"{schema}: writes a non-tensor but derived {derived}")
            continue
        got_aliases = frozenset((a.output, a.operand) for a in derived.aliases)
        if derived.written != writes or got_aliases != aliases:
            mismatches.append(f"{schema}: writes {sorted(derived.written)} vs {sorted(writes)}, "
                              f"aliases {sorted(got_aliases)} vs {sorted(aliases)}")
        tensor_positions = {i for i, a in enumerate(schema.arguments) if _is_tensorish(a.type)}
        unread = {i for i in tensor_positions if derived.access(i) is None}
        if unread:
            mismatches.append(f"{schema}: tensor operands {sorted(unread)} have no effect at all")
        if len(signature.params) != len(schema.arguments):
            mismatches.append(f"{schema}: signature has {len(signature.params)} params")
    assert not mismatches, f"{len(mismatches)} of {len(schemas)} schemas disagree:\n" + "\n".join(mismatches[:20])
    print(f"checked {len(schemas)} schemas")  # shown with -s; the count is reported in the issue note


def test_oracle_sees_list_return_annotations_that_torch_c_drops() -> None:
    schema = aten.split.Tensor._schema
    assert schema.returns[0].alias_info.before_set == set()  # torch._C loses the (a) of Tensor(a)[]
    assert _expected(schema)[1] == {(0, 0)}


# --- specific ops --------------------------------------------------------------------------------------------------
def test_in_place_op_is_read_write_and_returns_self() -> None:
    eff, sig = derive(aten.add_.Tensor)
    assert eff.access(0) is Access.READ_WRITE and eff.access(1) is Access.READ
    assert eff.aliases == {Alias(0, 0)}
    assert [p.name for p in sig.params] == ["self", "other", "alpha"] and sig.num_outputs == 1


def test_copy_destination_is_a_pure_write() -> None:
    eff, _ = derive(aten.copy_.default)
    assert eff.access(0) is Access.WRITE and eff.access(1) is Access.READ


def test_partial_overwrite_stays_read_write() -> None:
    eff, _ = derive(aten.index_copy_.default)
    assert eff.access(0) is Access.READ_WRITE
    assert {eff.access(2), eff.access(3)} == {Access.READ}


def test_out_variant_writes_out_blindly_and_returns_it() -> None:
    eff, sig = derive(aten.add.out)
    out = sig.position("out")
    assert eff.written == {out} and eff.access(out) is Access.WRITE
    assert eff.aliases == {Alias(0, out)}


def test_multi_output_out_variant_aliases_each_output_to_its_buffer() -> None:
    eff, sig = derive(aten.max.dim_max)
    assert eff.aliases == {Alias(0, sig.position("max")), Alias(1, sig.position("max_values"))}


def test_tensor_list_write_marks_the_list_operand() -> None:
    eff, sig = derive(aten._foreach_add_.Scalar)
    assert eff.written == {0} and sig.params[0].kind is effects.ParamKind.TENSOR_LIST and sig.num_outputs == 0


def test_list_return_views_its_input() -> None:
    eff, _ = derive(aten.unbind.int)
    assert eff.aliases == {Alias(0, 0)} and eff.written == frozenset()


def test_view_is_definite_and_reshape_is_may_alias() -> None:
    assert derive(aten.view.default)[0].aliases == {Alias(0, 0, may=False)}
    assert derive(aten.reshape.default)[0].aliases == {Alias(0, 0, may=True)}


def test_random_op_orders_on_rng() -> None:
    eff, _ = derive(aten.bernoulli_.float)
    assert eff.access(0) is Access.WRITE
    assert ResourceEffect(RNG_DEFAULT, ordered=True) in eff.resources
    assert RNG_DEFAULT not in derive(aten.add.Tensor)[0].ordered_resources


def test_generator_write_is_opaque_not_pure() -> None:
    eff, _ = derive(aten.manual_seed.generator)
    assert eff.opaque


def test_packet_is_the_union_of_its_overloads() -> None:
    eff, sig = derive(aten.bernoulli_)
    expected = derive(aten.bernoulli_.float)[0] | derive(aten.bernoulli_.Tensor)[0]
    assert eff == expected and sig is None


def test_custom_op_mutates_args_derives_its_writes() -> None:
    @torch.library.custom_op("thunder_effects_test::scale_into", mutates_args=("dst",))
    def scale_into(src: torch.Tensor, dst: torch.Tensor, factor: float) -> torch.Tensor:
        dst.copy_(src * factor)
        return src.clone()

    resolution = effects.Registry().resolve(scale_into)
    assert resolution.origin == "derived"
    assert resolution.effects.written == {1} and resolution.effects.access(0) is Access.READ
    assert resolution.effects.aliases == frozenset()  # custom ops may not return views of inputs
    assert [p.name for p in resolution.signature.params] == ["src", "dst", "factor"]


def test_custom_op_without_mutation_derives_reads_only() -> None:
    @torch.library.custom_op("thunder_effects_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    eff = effects.Registry().lookup(double)
    assert eff.written == frozenset() and eff.access(0) is Access.READ and not eff.opaque


def test_non_torch_keys_are_not_derived() -> None:
    assert derive("aten::add_") is None and derive(42) is None


def test_native_batch_norm_schema_hides_its_running_stat_writes() -> None:
    """PyTorch's schema for aten.native_batch_norm lacks ``(a!)`` on running_mean/running_var, yet training mode
    updates them in place. Schema derivation can only be as truthful as the schema: declare this op explicitly.
    If this test fails, PyTorch fixed the schema and the note (and any explicit declaration) can go."""
    eff, sig = derive(aten.native_batch_norm.default)
    mean_pos, var_pos = sig.position("running_mean"), sig.position("running_var")
    assert eff.access(mean_pos) is Access.READ and eff.access(var_pos) is Access.READ
    x = torch.randn(4, 3)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    aten.native_batch_norm.default(x, None, None, running_mean, running_var, True, 0.5, 1e-5)
    assert not torch.equal(running_mean, torch.zeros(3)), "the op does write running_mean"
    legit, legit_sig = derive(aten._native_batch_norm_legit.default)
    assert legit.access(legit_sig.position("running_mean")) is Access.READ_WRITE  # the honest sibling


def test_union_alias_set_return_may_alias() -> None:
    eff, _ = from_schema(torch._C.parse_schema("my::to(Tensor(a) self, bool copy=False) -> Tensor(b|a)"))
    assert eff.aliases == {Alias(0, 0, may=True)}


def test_list_return_annotated_after_the_brackets() -> None:
    eff, _ = from_schema(torch._C.parse_schema("my::all_reduce_(Tensor[](a!) inputs, str op) -> Tensor[](a!)"))
    assert eff.written == {0} and eff.aliases == {Alias(0, 0)}


def test_optional_list_of_optional_tensors_is_a_tensor_operand() -> None:
    eff, sig = from_schema(torch._C.parse_schema("my::grad(Tensor[] outputs, Tensor?[]? grads=None) -> ()"))
    assert sig.params[1].kind is effects.ParamKind.TENSOR_LIST and eff.access(1) is Access.READ


def test_cudagraph_unsafe_tag_derives_uncapturable() -> None:
    @torch.library.custom_op("thunder_effects_test::host_sync", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,))
    def host_sync(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    eff = effects.Registry().lookup(host_sync)
    assert eff.uncapturable and not eff.capturable and eff.access(0) is Access.READ
    assert effects.Registry().lookup(torch.ops.thunder_effects_test.host_sync).uncapturable  # the packet too
    assert all(derive(op)[0].capturable for op in (aten.add_.Tensor, aten.copy_.default, aten.normal_.default))
