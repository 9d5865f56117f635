"""The effects of Thunder's collectives (:mod:`thunder_ext.declare.collectives`) and the collective-order certificate's
lists and diff (:mod:`thunder_ext.passes.certificate`), in one process: a single-rank gloo group makes Thunder trace
real
collectives; the exchange with other ranks is faked. The 2-rank behaviour is ``test_distributed.py``."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import thunder  # noqa: E402
import thunder.distributed.prims as dist_prims  # noqa: E402
import thunder.torch as ltorch  # noqa: E402
from thunder.executors import torchex  # noqa: E402

import effects  # noqa: E402
import thunder_ext  # noqa: E402
from effects import Const, DependencyGraph  # noqa: E402
from thunder_ext.declare import collectives  # noqa: E402
from thunder_ext.declare.adapter import adapt  # noqa: E402
from thunder_ext.passes.certificate import Collective, CollectiveCertificate, Exchange, certify, collectives_of  # noqa: E402
from thunder_ext.declare.keys import impl_key  # noqa: E402
from thunder_ext.declare.resolve import bsym_effects as effects_of  # noqa: E402


@pytest.fixture(scope="module")
def groups():
    """A single-rank gloo world and a second group over the same rank."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD, dist.new_group([0])
    dist.destroy_process_group()


class _Group:
    group_name = "7"


def _at(key: object, *operands: object) -> effects.Effects:
    return effects.default_registry().resolve(key).at(operands)


# --- declarations -------------------------------------------------------------------------------------------------
def test_every_collective_and_its_torch_implementation_is_declared() -> None:
    registry = effects.default_registry()
    keys = [sym.id for sym in collectives.declarations()]
    keys += [impl_key(torchex.ex.implmap[pid].symbol) for pid in dist_prims.PrimIDs if pid in torchex.ex.implmap]
    assert len(keys) >= 22
    for key in keys:
        assert registry.resolve(key).origin == "declared", key
    assert not [k for k in thunder_ext.coverage().opaque_keys if k in keys]


@pytest.mark.parametrize("key", [dist_prims.PrimIDs.ALL_REDUCE, ("torch_all_reduce_prim_impl", "torch")])
def test_skip_clone_decides_whether_all_reduce_writes_its_input(key: object) -> None:
    op, group = Const(dist_prims.DistributedReduceOps.SUM), Const(_Group())
    in_place = _at(key, "a", op, group, Const(False), Const(True))
    assert in_place.written == frozenset({0}) and [str(a) for a in in_place.aliases] == ["out0 aliases 0"]
    assert [str(r) for r in in_place.resources] == ["comm[7]"]
    cloned = _at(key, "a", op, group, Const(True), Const(False))
    assert cloned.written == frozenset() and not cloned.aliases and [str(r) for r in cloned.resources] == ["comm[7]"]


def test_in_place_torch_collectives_write_their_destination() -> None:
    gather = _at(ltorch.all_gather_.id, "out", "inp", Const(_Group()), Const(False))
    assert gather.written == frozenset({0}) and gather.access(0) is effects.Access.WRITE
    reduce = _at(ltorch.all_reduce_.id, "a", Const(None), Const(_Group()), Const(False))
    assert reduce.access(0) is effects.Access.READ_WRITE and [str(r) for r in reduce.resources] == ["comm[7]"]


def test_waits_complete_the_write_and_bucketing_orders_on_global_state() -> None:
    registry = effects.default_registry()
    wait = registry.lookup(dist_prims.PrimIDs.WAIT)
    assert wait.written == frozenset({0}) and [str(a) for a in wait.aliases] == ["out0 aliases 0"]
    for pid in (dist_prims.PrimIDs.PACK, dist_prims.PrimIDs.UPDATE_BUCKET_VIEW, dist_prims.PrimIDs.UNPACK,
                dist_prims.PrimIDs.STASH_GRAD_FOR_FSDP):
        assert effects.GLOBAL in registry.lookup(pid).ordered_resources, pid
    assert registry.lookup(dist_prims.PrimIDs.UNPACK).written == frozenset({1})


def test_an_unknown_group_orders_against_everything() -> None:
    unknown = _at(dist_prims.PrimIDs.ALL_REDUCE, "a", Const(None), "group_value", Const(False), Const(True))
    assert effects.GLOBAL in unknown.ordered_resources and unknown.written == frozenset({0})


# --- traced programs --------------------------------------------------------------------------------------------
def _two_groups(world, other):
    def step(x, y):
        b = x * 2
        dist.all_reduce(x, group=world)
        dist.all_reduce(y, group=other)
        return b + x

    return step


def test_a_traced_program_orders_each_group_on_its_own_chain(groups) -> None:
    world, other = groups
    jfn = thunder_ext.jit(_two_groups(world, other), executors=["torch"])
    x, y = torch.ones(3), torch.ones(2)
    assert torch.equal(jfn(x, y), torch.full((3,), 3.0))
    adapted = adapt(thunder.last_traces(jfn)[-1])
    comms = [i for i, inst in enumerate(adapted.program.instructions) if collectives.communicates(inst.effects)]
    assert [str(next(iter(adapted.program.instructions[i].effects.resources)).resource) for i in comms] == [
        f"comm[{world.group_name}]", f"comm[{other.group_name}]"]
    graph = DependencyGraph.build(adapted.program)
    assert graph.path(comms[0], comms[1]) is None


def _async_gather(world):
    def step(out, x):
        b = out * 1
        handle = dist.all_gather_into_tensor(out, x * 2, group=world, async_op=True)
        handle.wait()
        return out + b  # reads what the gather wrote: after Thunder's wait and copy_, which sort_waits moves late

    return step


@pytest.mark.parametrize("executors", [["torch"], ["torchcompile"]])
def test_a_read_of_an_async_collectives_buffer_stays_after_its_wait(groups, executors) -> None:
    world, _ = groups
    jfn = thunder_ext.jit(_async_gather(world), executors=executors)
    out, x = torch.full((4,), 5.0), torch.arange(4.0)
    assert torch.equal(jfn(out, x), x * 2 + 5) and torch.equal(out, x * 2)
    names = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols]
    assert any("wait" in n for n in names)


def _resolved_collectives(traces) -> list[str]:
    """Every collective of ``traces`` found by resolving the effects of every bound symbol (what the certificate's
    declaration-based prefilter must not miss)."""

    def walk(bsyms):
        for bsym in bsyms:
            if not collectives.communicates(effects_of(bsym)):
                continue
            if bsym.sym.is_fusion and bsym.subsymbols:
                yield from walk(bsym.subsymbols)
            else:
                yield bsym.sym.name

    return [name for trace in traces for name in walk(trace.bound_symbols)]


def test_the_certificate_lists_collectives_per_group_with_argument_names(groups) -> None:
    world, other = groups
    jfn = thunder_ext.jit(_two_groups(world, other), executors=["torchcompile"])
    jfn(torch.ones(3), torch.ones(2))
    final = thunder.last_traces(jfn)[-1]
    assert not any(collectives.communicates(effects_of(b)) for b in final.bound_symbols if not b.sym.is_fusion)
    chains, found = collectives_of([final], ("x", "y"))  # found inside the torch.compile region
    assert {k: [str(c) for c in v] for k, v in chains.items()} == {
        world.group_name: [f"all_reduce_(f32[3] x, SUM, False) on comm[{world.group_name}]"],
        other.group_name: [f"all_reduce_(f32[2] y, SUM, False) on comm[{other.group_name}]"],
    }
    assert found == {world.group_name: world, other.group_name: other}
    assert sorted(c.op for chain in chains.values() for c in chain) == sorted(_resolved_collectives([final]))


# --- comparing across ranks (faked) -----------------------------------------------------------------------------
def _exchange(peer: list[str] | None) -> tuple[Exchange, list[str]]:
    """Rank 0 is this process; rank 3 has ``peer`` as its list (``None``: the same as ours)."""
    asked: list[str] = []

    def digests(group: object, mine: bytes) -> list[bytes]:
        asked.append("digests")
        return [mine, mine if peer is None else b"other"]

    def sequences(group: object, mine: list[str]) -> list[list[str]]:
        asked.append("sequences")
        return [mine, peer]

    return Exchange(digests, sequences, lambda group: [0, 3]), asked


def _chain(*shapes: int) -> dict[str, list[Collective]]:
    return {"0": [Collective("all_reduce", "0", (f"f32[{n}]",), ("SUM",)) for n in shapes]}


def test_equal_lists_cost_one_digest_exchange() -> None:
    exchange, asked = _exchange(None)
    certify(_chain(4, 3), {"0": object()}, exchange=exchange)
    assert asked == ["digests"]


def test_a_difference_names_the_first_differing_collective() -> None:
    exchange, _ = _exchange(["all_reduce(f32[4], SUM) on comm[0]", "all_reduce(f32[2], SUM) on comm[0]",
                             "all_reduce(f32[1], SUM) on comm[0]"])
    with pytest.raises(thunder_ext.CollectiveOrderError) as info:
        certify(_chain(4, 3), {"0": object()}, exchange=exchange)
    message = str(info.value)
    assert "process group comm[0] (ranks [0, 3])" in message and "(rank 0: 2, rank 3: 3)" in message
    assert "first difference is collective #1:\n  rank 0: all_reduce(f32[3], SUM) on comm[0]\n" in message
    assert "  rank 3: all_reduce(f32[2], SUM) on comm[0]\n" in message
    assert "certify_collectives=False" in message


def test_training_compilations_are_certified_once_forward_and_backward_together(groups) -> None:
    seen: list[list[str]] = []

    def digests(group: object, mine: bytes) -> list[bytes]:
        return [mine]

    def sequences(group: object, mine: list[str]) -> list[list[str]]:
        raise AssertionError("equal digests need no lists")

    certificate = CollectiveCertificate(Exchange(digests, sequences, lambda group: [0]))
    original = collectives_of

    def spy(traces, arguments=()):
        chains, found = original(traces, arguments)
        seen.append([str(c) for chain in chains.values() for c in chain])
        assert [c.op for chain in chains.values() for c in chain] == _resolved_collectives(traces)
        return chains, found

    world, _ = groups
    model = torch.nn.Linear(3, 2)
    from thunder.distributed import ddp

    jitted = ddp(thunder_ext.jit(model, executors=["torch"], certify_collectives=False, transforms=[certificate]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("thunder_ext.passes.certificate.collectives_of", spy)
        jitted(torch.randn(4, 3)).sum().backward()
    assert len(seen) == 1 and len(seen[0]) == 2  # one certification: the backward's two gradient all-reduces
