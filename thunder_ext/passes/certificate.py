"""The collective-order certificate: ranks whose compiled programs would issue different collectives fail at
compile time with a readable diff, instead of hanging or reducing the wrong tensors.

All ranks of a process group must issue that group's collectives in the same order with matching shapes; gloo and
NCCL match calls by position only, so a rank whose trace differs (rank-dependent control flow or shapes, a
different cache entry) silently reduces the wrong tensors (same shapes) or hangs. Every rank compiles its own
trace, so nothing guarantees agreement; the certificate checks it once per compilation:

1. :class:`CollectiveCertificate` is the last ``thunder_ext.jit`` transform. After every other pass it reads the
   final computation trace (and, when training, waits for the final backward trace, whose collectives follow the
   forward's) and lists, per process group, the collectives in execution order (:func:`collectives_of`): the
   op, its tensor operands' dtypes and shapes (and names, for the compiled function's own arguments), its
   other constants. Collectives are found by their effects (a ``comm[group]`` resource,
   :func:`thunder_ext.declare.collectives.communicates`), inside fusion regions too; the effects are resolved only for
   bound symbols whose declarations may communicate (a lookup per symbol), so listing costs milliseconds for
   thousands of bound symbols (``benchmarks/results/certificate_cost.md``).
2. :func:`certify` hashes each group's list (SHA-256) and all-gathers the 32-byte digests **over that group**,
   groups in name order: one small all-gather per process group the function uses (one for DDP or FSDP), before
   the compiled code first runs.
3. Equal digests: nothing more happens, and the steady state costs nothing (the check runs at compile time only).
   Different digests are seen by every member at once, which then exchange the lists themselves and raise
   :class:`CollectiveOrderError` naming the first differing collective of the two ranks.

Limits: a rank that compiles a function with *no* collective on a group, while its peers do, is not asked and the
peers wait in the certificate's all-gather until the process group times out (as the program itself would); the
interleaving of two different groups' collectives is not compared (each group's own order is).
``thunder_ext.jit(..., certify_collectives=False)`` turns the check off.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from effects import DependentEffects, Effects

from thunder.core.proxies import FutureTensorProxy, Proxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceTag
from thunder.core.transform_common import Transform

from ..declare.collectives import COMM, communicates, group_key
from ..declare.resolve import Resolver, resolver_for

__all__ = ["Collective", "CollectiveOrderError", "CollectiveCertificate", "collectives_of", "certify", "Exchange",
           "TORCH_EXCHANGE"]


class CollectiveOrderError(RuntimeError):
    """The ranks of a process group would issue different collectives (see :mod:`thunder_ext.passes.certificate`)."""


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective as the certificate compares it across ranks."""

    op: str
    group: str
    operands: tuple[str, ...]
    """Per tensor operand: dtype and shape, and the name of the compiled function's argument it is, if one."""
    constants: tuple[str, ...]
    """The other non-tensor operands (reduction, flags), process groups left out (they are ``group``)."""

    def __str__(self) -> str:
        return f"{self.op}({', '.join((*self.operands, *self.constants))}) on {COMM}[{self.group}]"


def _is_process_group(value: object) -> bool:
    return torch.distributed.is_available() and isinstance(value, torch.distributed.ProcessGroup)


def _describe_tensor(proxy: Proxy, arguments: frozenset[str]) -> str:
    text = f"{'future ' if isinstance(proxy, FutureTensorProxy) else ''}{proxy.dtype.shortname()}{list(proxy.shape)}"
    return f"{text} {proxy.name}" if proxy.name in arguments else text


def _constant(value: object) -> str:
    name = getattr(value, "name", None)  # enums, Python's and pybind's (``ReduceOp.SUM``): their name
    return name if isinstance(name, str) and not isinstance(value, str) else repr(value)


def _may_communicate(resolver: Resolver, bsym: BoundSymbol, leaves: dict[int, bool]) -> bool:
    """Whether ``bsym`` may have a ``comm`` effect, from declarations alone (a dictionary lookup per symbol): its
    declaration has one or depends on constants (collectives do: the group), or one of its subsymbols may. The
    final traces' bound symbols are mostly fresh (their effects not resolved yet), so resolving only these
    candidates keeps the listing at a lookup per bound symbol."""
    if not bsym.subsymbols:
        key = id(bsym.sym)
        found = leaves.get(key)
        if found is None:
            declared = resolver.declared(bsym)
            found = leaves[key] = isinstance(declared, DependentEffects) or (
                isinstance(declared, Effects) and communicates(declared))
        return found
    declared = resolver.declared(bsym)
    if isinstance(declared, DependentEffects) or (isinstance(declared, Effects) and communicates(declared)):
        return True
    return any(_may_communicate(resolver, sub, leaves) for sub in bsym.subsymbols)


def _leaves(bsyms: Iterable[BoundSymbol], resolver: Resolver, leaves: dict[int, bool]) -> Iterable[BoundSymbol]:
    """The bound symbols that communicate, in execution order, looking inside fusion regions."""
    for bsym in bsyms:
        if not _may_communicate(resolver, bsym, leaves) or not communicates(resolver.resolve(bsym)[1]):
            continue
        if bsym.sym.is_fusion and bsym.subsymbols:
            yield from _leaves(bsym.subsymbols, resolver, leaves)
        else:
            yield bsym


def collectives_of(traces: Sequence[TraceCtx], arguments: Iterable[str] = ()) -> tuple[dict[str, list[Collective]],
                                                                                          dict[str, Any]]:
    """Per group key, the collectives of ``traces`` (run one after the other) in order, and the process group
    objects named by the group keys (those the bound symbols carry)."""
    names = frozenset(arguments)
    chains: dict[str, list[Collective]] = {}
    groups: dict[str, Any] = {}
    resolver = resolver_for(None)
    leaves: dict[int, bool] = {}
    for trace in traces:
        for bsym in _leaves(trace.bound_symbols, resolver, leaves):
            flat, _ = tree_flatten((bsym.args, bsym.kwargs))
            tensors = (p for p in flat if isinstance(p, (TensorProxy, FutureTensorProxy)))
            operands = tuple(_describe_tensor(p, names) for p in tensors)
            constants = tuple(_constant(v) for v in flat if not isinstance(v, Proxy) and not _is_process_group(v))
            groups.update((group_key(v), v) for v in flat if _is_process_group(v))
            for effect in sorted(resolver.resolve(bsym)[1].resources):
                if effect.resource.kind == COMM:
                    key = str(effect.resource.key)
                    chains.setdefault(key, []).append(Collective(bsym.sym.name, key, operands, constants))
    return chains, groups


# --- comparing across ranks -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Exchange:
    """How ranks share what the certificate compares: ``digests(group, mine)`` all-gathers one digest per member
    (in group rank order), ``sequences(group, mine)`` the collective lists themselves (only on a mismatch), and
    ``ranks(group)`` the members' global ranks."""

    digests: Callable[[Any, bytes], list[bytes]]
    sequences: Callable[[Any, list[str]], list[list[str]]]
    ranks: Callable[[Any], list[int]]


def _device_of(group: Any) -> torch.device:
    backend = str(torch.distributed.get_backend(group))
    return torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend else torch.device("cpu")


def _torch_digests(group: Any, mine: bytes) -> list[bytes]:
    dist = torch.distributed
    tensor = torch.frombuffer(bytearray(mine), dtype=torch.uint8).to(_device_of(group))
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, tensor, group=group)
    return [bytes(t.cpu().tolist()) for t in gathered]


def _torch_sequences(group: Any, mine: list[str]) -> list[list[str]]:
    dist = torch.distributed
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, mine, group=group)
    return gathered


TORCH_EXCHANGE = Exchange(_torch_digests, _torch_sequences,
                          lambda group: list(torch.distributed.get_process_group_ranks(group)))
"""The exchange over ``torch.distributed`` (the group's own backend: CPU tensors for gloo, CUDA for NCCL)."""


def _digest(lines: Sequence[str]) -> bytes:
    return hashlib.sha256("\n".join(lines).encode()).digest()


def certify(chains: dict[str, list[Collective]], groups: dict[str, Any], *,
            exchange: Exchange = TORCH_EXCHANGE) -> None:
    """Compare each group's collectives with the other members' (see the module docstring).

    Raises:
        CollectiveOrderError: two members of a group would issue different collectives.
    """
    for key in sorted(chains):
        lines = [str(c) for c in chains[key]]
        group = groups.get(key)
        if group is None:
            group = _group_named(key)
        digests = exchange.digests(group, _digest(lines))
        if len(set(digests)) > 1:
            raise CollectiveOrderError(_diff(key, exchange.ranks(group), exchange.sequences(group, lines)))


def _group_named(key: str) -> Any:
    dist = torch.distributed
    if key == "default":
        return dist.group.WORLD
    from torch._C._distributed_c10d import _resolve_process_group  # what Thunder does for groups given by name

    return _resolve_process_group(key)  # type: ignore[arg-type]  # GroupName: a NewType of str


def _diff(key: str, ranks: list[int], sequences: list[list[str]]) -> str:
    first = sequences[0]
    other = next(k for k, s in enumerate(sequences) if s != first)
    theirs = sequences[other]
    index = next((i for i, (a, b) in enumerate(zip(first, theirs, strict=False)) if a != b),
                 min(len(first), len(theirs)))
    a, b = ranks[0], ranks[other]

    def at(seq: list[str]) -> str:
        return seq[index] if index < len(seq) else "nothing (its sequence ends here)"

    width = max((len(line) for line in first), default=0) + 8
    listing = [f"  {'rank ' + str(a):<{width}}rank {b}"]
    listing += [f"  {'#' + str(i) + ' ' + (first[i] if i < len(first) else '-'):<{width}}"
                f"#{i} {theirs[i] if i < len(theirs) else '-'}" + ("   <-- first difference" if i == index else "")
                for i in range(max(len(first), len(theirs)))]
    return (
        f"the ranks of process group {COMM}[{key}] (ranks {ranks}) would issue different collectives on it "
        f"(rank {a}: {len(first)}, rank {b}: {len(theirs)}); the first difference is collective #{index}:\n"
        f"  rank {a}: {at(first)}\n  rank {b}: {at(theirs)}\n"
        "Running this would reduce the wrong tensors or hang. Per rank, in execution order:\n" + "\n".join(listing)
        + "\nMake every rank trace the same collectives in the same order with the same shapes (look for "
        "rank-dependent control flow or shapes around collectives), or pass certify_collectives=False to "
        "thunder_ext.jit to skip this check."
    )


# --- the transform ------------------------------------------------------------------------------------------------
@dataclass(eq=False)
class CollectiveCertificate(Transform):
    """Certifies every compilation's collective order across ranks (the last ``thunder_ext.jit`` transform)."""

    exchange: Exchange = TORCH_EXCHANGE
    _forward: list[TraceCtx] = field(default_factory=list, repr=False)
    """The final forward trace of a training compilation, held until its backward trace arrives."""

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs: Any) -> TraceCtx:
        if TraceTag.AUGMENTED_FORWARD in computation_trace.tags:
            self._forward[:] = [computation_trace]
            return computation_trace
        traces, self._forward[:] = [*self._forward, computation_trace], []
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return computation_trace
        flat, _ = tree_flatten((traces[0].args, traces[0].kwargs))
        chains, groups = collectives_of(traces, (p.name for p in flat if isinstance(p, Proxy)))
        if chains:
            certify(chains, groups, exchange=self.exchange)
        return computation_trace
