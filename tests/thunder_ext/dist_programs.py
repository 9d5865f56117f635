"""Programs with collectives and in-place ops, and the jobs that run them on every gloo rank against eager
(:mod:`gloo_ranks` runs the jobs; ``test_distributed.py`` asserts on what they return).

Inputs depend on the rank (``+ 10 * rank``): a sum of equal tensors would hide a collective that reads the wrong
value. Every program runs eagerly on clones first, then through the jitted function twice (first call and cache
hit) on fresh copies; outputs and every input after the call must match eager on every rank.

Executor configurations: the torch executor; the torchcompile executor, which claims the collectives (dynamo then
traces ``torch.distributed``), with both fusion types; and a torchcompile executor that leaves collectives to the
torch executor (``torchcompile-nocomm``), which is what nvFuser does on GPUs: there, stock Thunder's
rematerialization recomputes ``x * 2`` after the all-reduce has written ``x``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import thunder_ext  # noqa: I001  (before thunder: the import shim)
import torch
import torch.distributed as dist

import thunder
from thunder.executors.torch_compile import TorchCompileExecutor
from thunder.executors.torchex import ex as torch_ex
from thunder.extend import ImplInfo

import thunder.distributed.prims as dist_prims
import thunder.torch as ltorch

_COLLECTIVE_IDS = {*dist_prims.PrimIDs, ltorch.all_reduce_.id, ltorch.all_gather_.id, ltorch.reduce_scatter_.id,
                   ltorch.all_reduce.id, ltorch.all_gather.id, ltorch.reduce_scatter.id, ltorch.broadcast.id}

NOCOMM = TorchCompileExecutor(name="torchcompile_nocomm")
"""torch.compile regions that never contain a collective (nvFuser's coverage on GPUs)."""
NOCOMM._implmap = {op: ImplInfo() for op in torch_ex.implmap if op not in _COLLECTIVE_IDS}

CONFIGS: dict[str, dict[str, Any]] = {
    "torch": {"executors": ["torch"]},
    "torchcompile": {"executors": ["torchcompile"]},
    "torchcompile/dataflow": {"executors": ["torchcompile"], "fusion_type": "dataflow"},
    "torchcompile-nocomm": {"executors": [NOCOMM]},
    "torchcompile-nocomm/dataflow": {"executors": [NOCOMM], "fusion_type": "dataflow"},
}

_groups: dict[str, Any] = {}

GROUP_NAMES = ("a", "b")
"""The named process groups programs use, made by :func:`make_groups` before any program is traced."""


def make_groups() -> None:
    """Create the named groups (every job that runs a program calls this first, so all ranks create them in the
    same order). Never inside a trace: Thunder 0.2.6 cannot interpret ``dist.new_group`` (it calls a
    ``typing.NewType``, ``GroupName``), so a group first asked for while tracing failed, and whether it was first
    depended on which jobs this rank had run before (the order dependence of ``test_two_groups_are_not_serialized``
    under ``-n auto``)."""
    for name in GROUP_NAMES:
        if name not in _groups:
            _groups[name] = dist.new_group(list(range(dist.get_world_size())))


def group(name: str) -> Any:
    """A process group over every rank: ``"world"`` or one of :data:`GROUP_NAMES`."""
    return dist.group.WORLD if name == "world" else _groups[name]


# --- the programs ------------------------------------------------------------------------------------------------
def remat(x):
    b = x * 2
    dist.all_reduce(x)
    return b + x


def remat_sin(x, y):
    b = x.sin()
    dist.all_reduce(x)
    return b * y, x * 1


def inplace_around(x):
    x.add_(1)
    b = x * 2
    dist.all_reduce(x)
    x.mul_(3)
    return b + x


def read_then_reduce(x):
    b = x + 1
    dist.all_reduce(x)
    return b


def reduce_only(x):
    dist.all_reduce(x)


def sum_then_max(x, y):
    s = x * 1
    dist.all_reduce(x)
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    return s + x, y - x


def view_of_argument(x):
    dist.all_reduce(x[1:3])
    return x * 2


def intermediate(x):
    h = x * 2
    dist.all_reduce(h)
    return h + x


def gather_into(out, x):
    dist.all_gather_into_tensor(out, x * 2, group=dist.group.WORLD)
    return out.sum() + x


def scatter_into(out, x):
    b = out * 1
    dist.reduce_scatter_tensor(out, x, group=dist.group.WORLD)
    return out + b


def async_gather(out, x):
    b = out * 1
    # Thunder: all_gather(do_async), wait, copy_ into out (nothing reads the copy by name)
    handle = dist.all_gather_into_tensor(out, x * 2, group=dist.group.WORLD, async_op=True)
    handle.wait()
    return out + b


def functional_wait(x):
    b = x * 2
    y = torch.ops._c10d_functional.all_reduce(x, "sum", dist.group.WORLD.group_name)
    y = torch.ops._c10d_functional.wait_tensor(y)
    return b + y, x + 1


def aliased_arguments(x, y):
    b = y * 2
    dist.all_reduce(x)
    return b + y


def two_groups(x, y):
    dist.all_reduce(x, group=group("a"))
    dist.all_reduce(y, op=dist.ReduceOp.MAX, group=group("b"))
    return x + y


def same_group(x, y):
    dist.all_reduce(x, group=group("a"))
    dist.all_reduce(y, op=dist.ReduceOp.MAX, group=group("a"))
    return x + y


@dataclass(frozen=True)
class Program:
    fn: Callable[..., Any]
    make: Callable[[int], tuple[torch.Tensor, ...]]
    """Fresh rank-dependent inputs (called for eager and for every jitted call)."""


def _vec(rank: int, n: int = 4, offset: float = 1.0) -> torch.Tensor:
    return torch.arange(float(n)) + 10.0 * rank + offset


def _aliased(rank: int) -> tuple[torch.Tensor, ...]:
    x = _vec(rank)
    return x, x[:2]


PROGRAMS: dict[str, Program] = {
    "remat": Program(remat, lambda r: (_vec(r),)),
    "remat_sin": Program(remat_sin, lambda r: (_vec(r), _vec(r, offset=3.0))),
    "inplace_around": Program(inplace_around, lambda r: (_vec(r),)),
    "read_then_reduce": Program(read_then_reduce, lambda r: (_vec(r),)),
    "reduce_only": Program(reduce_only, lambda r: (_vec(r),)),
    "sum_then_max": Program(sum_then_max, lambda r: (_vec(r), _vec(r, offset=-5.0 * r))),
    "view_of_argument": Program(view_of_argument, lambda r: (_vec(r),)),
    "intermediate": Program(intermediate, lambda r: (_vec(r),)),
    "gather_into": Program(gather_into, lambda r: (torch.zeros(8), _vec(r))),
    "scatter_into": Program(scatter_into, lambda r: (torch.ones(2) * r, _vec(r))),
    "async_gather": Program(async_gather, lambda r: (torch.ones(8) * r, _vec(r))),
    "functional_wait": Program(functional_wait, lambda r: (_vec(r),)),
    "aliased_arguments": Program(aliased_arguments, _aliased),
    "two_groups": Program(two_groups, lambda r: (_vec(r), _vec(r, offset=2.0 - 7.0 * r))),
}

ORDERING_ONLY: dict[str, Program] = {"same_group": Program(same_group, PROGRAMS["two_groups"].make)}
"""Programs only :func:`collective_paths` looks at. (``group=None`` is no single group in Thunder: it traces each such
call with a fresh ``new_group()``, so ``sum_then_max``'s two all-reduces are on two communicators.)"""


# --- comparing with eager ------------------------------------------------------------------------------------------
def _flat(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat(item)]
    return [value]


def _differences(label: str, expected: Any, got: Any) -> list[str]:
    exp, out = _flat(expected), _flat(got)
    if len(exp) != len(out):
        return [f"{label}: {len(out)} values, eager has {len(exp)}"]
    found = []
    for k, (e, g) in enumerate(zip(exp, out, strict=True)):
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor) or e.shape != g.shape or not torch.allclose(e, g):
                found.append(f"{label}[{k}]: {g} but eager gives {e}")
        elif e != g:
            found.append(f"{label}[{k}]: {g!r} but eager gives {e!r}")
    return found


def check_program(rank: int, world_size: int, name: str, configs: tuple[str, ...],
                  jit: str = "thunder_ext") -> dict[str, list[str]]:
    """Job: program ``name`` under each executor configuration; per configuration, every difference from eager
    (outputs, then inputs after the call) on the first call and on the cache hit."""
    make_groups()
    program = PROGRAMS[name]
    eager_inputs = program.make(rank)
    expected = program.fn(*eager_inputs)
    jit_fn = thunder_ext.jit if jit == "thunder_ext" else thunder.jit
    report: dict[str, list[str]] = {}
    for config in configs:
        jfn = jit_fn(program.fn, **CONFIGS[config])
        found: list[str] = []
        for call in ("first call", "cache hit"):
            inputs = program.make(rank)
            got = jfn(*inputs)
            found += _differences(f"{call} output", expected, got)
            found += _differences(f"{call} inputs after the call", eager_inputs, inputs)
        report[config] = found
    return report


def collective_paths(rank: int, world_size: int, name: str) -> list[tuple[str, str, bool]]:
    """Job: for each pair of collectives in the final trace of ``name`` (torch executor), their labels and whether
    the effect graph orders one before the other (a path of edges between them)."""
    from effects import DependencyGraph
    from thunder_ext.declare.adapter import adapt

    make_groups()
    program = PROGRAMS.get(name) or ORDERING_ONLY[name]
    jfn = thunder_ext.jit(program.fn, executors=["torch"])
    jfn(*program.make(rank))
    adapted = adapt(thunder.last_traces(jfn)[-1])
    graph = DependencyGraph.build(adapted.program)
    comms = [i for i, b in enumerate(adapted.bsyms) if "all_reduce" in b.sym.name]
    return [(str(adapted.program.instructions[a]), str(adapted.program.instructions[b]), graph.path(a, b) is not None)
            for k, a in enumerate(comms) for b in comms[k + 1:]]


def timed(rank: int, world_size: int, job: str, *args: Any) -> tuple[float, Any]:
    """Job: another job of this module, and its wall time on this rank."""
    start = time.perf_counter()
    result = globals()[job](rank, world_size, *args)
    return time.perf_counter() - start, result


# --- data-parallel training ----------------------------------------------------------------------------------------
class _Net(torch.nn.Module):
    """Linear-BatchNorm-ReLU(inplace)-Linear: parameters, buffers written in training, an in-place activation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.act = torch.nn.ReLU(inplace=True)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.bn(self.fc1(x))))


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return _Net()


def _train(module: torch.nn.Module, params: list[torch.Tensor], rank: int, steps: int) -> list[float]:
    optimizer = torch.optim.SGD(params, lr=0.1)
    losses = []
    for step in range(steps):
        generator = torch.Generator().manual_seed(1000 + 10 * rank + step)  # each rank its own batch
        x, y = torch.randn(6, 4, generator=generator), torch.randn(6, 2, generator=generator)
        loss = (module(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _fsdp_options(kind: str) -> dict[str, Any]:
    """``fsdp`` (ZeRO-2, no bucketing: Thunder's defaults), ``fsdp-zero3`` (parameters gathered again for the
    backward), ``fsdp-layer`` / ``fsdp-zero3-block`` (bucketed collectives: ``pack_for_fsdp``/``unpack_for_fsdp``)."""
    from thunder.distributed import FSDPBucketingStrategy, FSDPType

    options: dict[str, Any] = {}
    if "zero3" in kind:
        options["sharding_strategy"] = FSDPType.ZERO3
    if kind.endswith("-layer"):
        options["bucketing_strategy"] = FSDPBucketingStrategy.LAYER
    if kind.endswith("-block"):
        options["bucketing_strategy"] = FSDPBucketingStrategy.BLOCK
    return options


def data_parallel(rank: int, world_size: int, kind: str, config: str, steps: int = 3,
                  jit: str = "thunder_ext") -> list[str]:
    """Job: ``steps`` training steps of ``_Net`` with Thunder's ``ddp``/``fsdp`` over ``thunder_ext.jit`` (forward,
    backward, SGD step) against eager ``DistributedDataParallel``: differences in losses and parameters/buffers."""
    from thunder.distributed import ddp, fsdp

    eager = _net()
    reference = torch.nn.parallel.DistributedDataParallel(eager, broadcast_buffers=False)  # buffers stay per rank
    eager_losses = _train(reference, list(eager.parameters()), rank, steps)
    model = _net()
    jitted = (thunder_ext.jit if jit == "thunder_ext" else thunder.jit)(model, **CONFIGS[config])
    wrapped = ddp(jitted) if kind == "ddp" else fsdp(jitted, device=torch.device("cpu"), **_fsdp_options(kind))
    losses = _train(wrapped, list(wrapped.parameters()), rank, steps)
    found = [f"step {k} loss {got} but eager DDP gives {exp}"
             for k, (exp, got) in enumerate(zip(eager_losses, losses, strict=True))
             if abs(exp - got) > 1e-5 * max(1.0, abs(exp))]
    state = _state(wrapped)
    expected = _state(eager)
    for k, v in state.items():  # fsdp shards parameters on dim 0 (padded to a multiple of the world size)
        if v.shape != expected[k].shape:
            parts = [torch.empty_like(v) for _ in range(world_size)]
            dist.all_gather(parts, v.contiguous())
            state[k] = torch.cat(parts)[: expected[k].shape[0]]
    for k, v in expected.items():
        if k not in state or state[k].shape != v.shape or not torch.allclose(state[k], v, atol=1e-5):
            found.append(f"{k} after {steps} steps: {state.get(k)} but eager DDP gives {v}")
    return found


# --- the collective-order certificate ----------------------------------------------------------------------------
def _diverging(rank: int) -> Callable[..., Any]:
    """Rank 1 reduces its arguments in the other order (its trace differs: rank-dependent control flow)."""

    def step(x, y):
        first, second = (x, y) if rank == 0 else (y, x)
        dist.all_reduce(first)
        dist.all_reduce(second)
        return x + 1, y + 1

    return step


def planted_divergence(rank: int, world_size: int, certify: bool) -> tuple[str, float]:
    """Job: compile and call the diverging step; the error text (empty if none) and the seconds it took."""
    jfn = thunder_ext.jit(_diverging(rank), executors=["torch"], certify_collectives=certify)
    start = time.perf_counter()
    try:
        jfn(torch.arange(4.0) + rank, torch.arange(4.0) - rank)  # same shapes: gloo would mix them silently
    except thunder_ext.CollectiveOrderError as error:
        return str(error), time.perf_counter() - start
    return "", time.perf_counter() - start
