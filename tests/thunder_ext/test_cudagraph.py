"""CUDA graph transform with in-place ops: writes to non-static arguments are copied back, warm-up never runs on
live (static) buffers, arguments that share storage keep sharing it in the graph (first call, cache hits, aliasing
that changes between calls), ops tagged ``cudagraph_unsafe`` are split out, and the report says what was decided.

On CPU the CUDA graph API is emulated faithfully enough for the runner's protocol: the capture records the region
without running it on the real inputs, ``replay`` runs it on the static inputs and writes the results into the
static outputs. On a GPU the same tests run for real (``benchmarks/gpu_check.sh`` runs this file with
``EFFECTS_REAL_CUDA_GRAPHS=1``, which fails instead of emulating when no GPU is there)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Callable

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import effects  # noqa: E402
import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder.core.proxies import TensorProxy  # noqa: E402
from thunder.transforms.cudagraph import CUDAGraphRunner, CUDAGraphTransform  # noqa: E402


class _EmulatedGraph:
    capturing: _EmulatedGraph | None = None

    def __init__(self) -> None:
        self.recorded: tuple | None = None

    def replay(self) -> None:
        fn, args, outs = self.recorded
        for dst, src in zip(tree_leaves(outs), tree_leaves(fn(*args)), strict=True):
            dst.copy_(src)


class _Stream:
    def wait_stream(self, other: object) -> None:
        pass

    def synchronize(self) -> None:
        pass


@contextlib.contextmanager
def _graph(graph: _EmulatedGraph, stream: object = None, pool: object = None):
    _EmulatedGraph.capturing = graph
    try:
        yield
    finally:
        _EmulatedGraph.capturing = None


def _recording(fn):
    def region(*args):
        graph = _EmulatedGraph.capturing
        if graph is None:
            return fn(*args)
        # capture records, it does not compute on the real inputs: run on clones only to get output buffers
        outs = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        graph.recorded = (fn, args, outs)
        return outs

    return region


@pytest.fixture
def cuda_graphs(monkeypatch):
    """Real CUDA graphs on a GPU; otherwise the emulation above."""
    if torch.cuda.is_available():
        yield "cuda"
        return
    if os.environ.get("EFFECTS_REAL_CUDA_GRAPHS"):
        pytest.fail("EFFECTS_REAL_CUDA_GRAPHS is set but torch.cuda.is_available() is False")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _EmulatedGraph)
    monkeypatch.setattr(torch.cuda, "graph", _graph)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: _EmulatedGraph.capturing is not None)
    original = CUDAGraphRunner.make_python_callable_from_symbols
    monkeypatch.setattr(CUDAGraphRunner, "make_python_callable_from_symbols",
                        lambda self, *a: _recording(original(self, *a)))
    yield "cpu"


def test_writes_to_ordinary_arguments_are_copied_back(cuda_graphs):
    def f(a, b):
        a.mul_(2)
        return a + b

    jfn = thunder_ext.jit(f, executors=["torch"], transforms=[CUDAGraphTransform()])
    a, b = torch.arange(4.0, device=cuda_graphs), torch.ones(4, device=cuda_graphs)
    ea, eb = a.clone(), b.clone()
    for _ in range(2):
        out = jfn(a, b)
        expected = f(ea, eb)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(a, ea)


def test_batch_norm_buffers_are_updated_once_per_call(cuda_graphs):
    torch.manual_seed(0)
    module = torch.nn.BatchNorm1d(3, momentum=0.5).to(cuda_graphs)
    reference = torch.nn.BatchNorm1d(3, momentum=0.5).to(cuda_graphs)
    reference.load_state_dict(module.state_dict())
    jmodule = thunder_ext.jit(module, executors=["torch"], transforms=[CUDAGraphTransform()])
    x = torch.randn(8, 3, device=cuda_graphs)
    for _ in range(2):
        torch.testing.assert_close(jmodule(x), reference(x))
        torch.testing.assert_close(module.running_mean, reference.running_mean)
        torch.testing.assert_close(module.running_var, reference.running_var)
        assert module.num_batches_tracked.item() == reference.num_batches_tracked.item()


def test_returned_tensors_survive_the_next_call(cuda_graphs):
    def f(a, b):
        a.add_(b)
        return a * 2, a

    jfn = thunder_ext.jit(f, executors=["torch"], transforms=[CUDAGraphTransform()])
    a, b = torch.zeros(4, device=cuda_graphs), torch.ones(4, device=cuda_graphs)
    first, first_a = jfn(a, b)
    kept = first.clone()
    second, second_a = jfn(a, b)  # replays the graph into the same static output buffers
    torch.testing.assert_close(first, kept)  # a fresh tensor: not overwritten by the second call
    torch.testing.assert_close(second, torch.full((4,), 4.0, device=cuda_graphs))
    assert first_a is a and second_a is a  # an output that is an argument is the caller's tensor, as in eager
    torch.testing.assert_close(a, torch.full((4,), 2.0, device=cuda_graphs))


def test_sharing_the_static_outputs_is_opt_in(cuda_graphs):
    def f(a):
        return (a * 2 + 1) * 3  # more than one op: a single-op region is not graphed

    jfn = thunder_ext.jit(f, executors=["torch"], transforms=[CUDAGraphTransform()],
                          thunder_effects_cudagraph_share_outputs=True)
    a = torch.ones(4, device=cuda_graphs)
    first = jfn(a)
    a.fill_(3.0)
    second = jfn(a)
    assert first.data_ptr() == second.data_ptr()  # the graph's static buffer, overwritten by the replay
    torch.testing.assert_close(first, torch.full((4,), 21.0, device=cuda_graphs))


# --- arguments that share storage ---------------------------------------------------------------------------------
def write_both(a, b):
    a.add_(1)
    b.mul_(2)
    return a * 3, b + 1


def read_write_read(a, b):
    before = b * 2  # read through one argument before the write through the other
    a.mul_(3)
    return before, b + a.sum()


Views = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]
PATTERNS: dict[str, Views] = {
    "same": lambda x, y: (x, x),
    "transpose": lambda x, y: (x, x.t()),
    "slice": lambda x, y: (x, x[1:]),
    "overlapping_slices": lambda x, y: (x[1:], x[:-1]),
    "view_and_base": lambda x, y: (x[1], x),
    "separate": lambda x, y: (x, y),
}
ALIASED = [name for name in PATTERNS if name != "separate"]


def _bases(device: str, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(16, device=device).reshape(4, 4).to(dtype)
    return x, x.flip(0) + 100


def check_calls(jfn: Callable[..., object], fn: Callable[..., object], calls: list[Views], device: str) -> None:
    """Each call's arguments are views of the same two bases (state carries over, as it does in eager); outputs
    and both bases after every call equal eager's."""
    got, expected = _bases(device), _bases(device)
    for k, views in enumerate(calls):
        out = jfn(*views(*got))
        torch.testing.assert_close(out, fn(*views(*expected)), msg=lambda m, k=k: f"call {k}: outputs differ\n{m}")
        torch.testing.assert_close(got, expected, msg=lambda m, k=k: f"call {k}: arguments differ after the call\n{m}")


def _jit(fn: Callable[..., object]) -> Callable[..., object]:
    return thunder_ext.jit(fn, executors=["torch"], transforms=[CUDAGraphTransform()])


def _runner(jfn: Callable[..., object]) -> CUDAGraphRunner:
    (transform,) = [t for t in thunder.compile_data(jfn).transforms if isinstance(t, CUDAGraphTransform)]
    return transform.cuda_graph_runner


@pytest.mark.parametrize("fn", [write_both, read_write_read], ids=lambda f: f.__name__)
@pytest.mark.parametrize("pattern", ALIASED)
def test_arguments_sharing_storage_match_eager_on_first_call_and_cache_hits(cuda_graphs, pattern, fn):
    jfn = _jit(fn)
    check_calls(jfn, fn, [PATTERNS[pattern]] * 3, cuda_graphs)
    (region,) = thunder_ext.cuda_graph_report(jfn).regions
    assert region.graphed and region.shared_storage == (region.inputs,)  # one static base for both arguments
    assert len(_runner(jfn).cuda_graph_cache) == 1  # later calls replayed the graph


def test_aliasing_that_changes_between_calls_matches_eager(cuda_graphs):
    order = ["separate", "same", "separate", "transpose", "same", "separate"]
    jfn = _jit(write_both)
    check_calls(jfn, write_both, [PATTERNS[name] for name in order], cuda_graphs)
    assert len(_runner(jfn).cuda_graph_cache) == 3  # one graph per alias pattern, reused when it comes back


def test_overlap_that_changes_within_one_trace_takes_another_graph(cuda_graphs):
    """Both calls share storage the same way for Thunder's cache (one trace), not for the graph: the offsets
    differ, so the alias pattern in the graph's cache key tells them apart."""
    overlapping: Views = lambda x, y: (x[0:2], x[1:3])  # noqa: E731
    disjoint: Views = lambda x, y: (x[0:2], x[2:4])  # noqa: E731
    jfn = _jit(write_both)
    check_calls(jfn, write_both, [overlapping, disjoint, overlapping, disjoint], cuda_graphs)
    assert len(thunder.compile_stats(jfn).interpreter_cache) == 1
    assert len(_runner(jfn).cuda_graph_cache) == 2


def test_the_same_overlap_elsewhere_in_the_storage_replays_the_same_graph(cuda_graphs):
    """Same shapes, strides and relative offsets at another place of the storage: one graph, copied in and back
    from where the arguments are now."""
    calls: list[Views] = [lambda x, y, i=i: (x[i:i + 2], x[i + 1:i + 3]) for i in (0, 1, 0, 1)]
    jfn = _jit(write_both)
    check_calls(jfn, write_both, calls, cuda_graphs)
    assert len(_runner(jfn).cuda_graph_cache) == 1


def test_arguments_of_different_dtypes_sharing_storage(cuda_graphs):
    def write_bits(a, b):
        a.mul_(2)
        return b + 1, a * 1

    bits: Views = lambda x, y: (x, x.view(torch.int32))  # noqa: E731
    check_calls(_jit(write_bits), write_bits, [bits, bits], cuda_graphs)


def test_aliasing_static_buffers_cannot_reproduce_runs_ungraphed_with_a_warning(cuda_graphs):
    def f(a, b):
        a.mul_(2)
        return a + b, b * 1

    jfn = _jit(f)
    x = torch.arange(4, device=cuda_graphs).to(torch.complex64)
    ex = x.clone()
    with pytest.warns(thunder_ext.CudaGraphFallback, match="b is a negative view sharing storage with a"):
        out = jfn(x, torch._neg_view(x))
    torch.testing.assert_close(out, f(ex, torch._neg_view(ex)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", thunder_ext.CudaGraphFallback)  # once per region and layout
        out = jfn(x, torch._neg_view(x))
    torch.testing.assert_close(out, f(ex, torch._neg_view(ex)))
    torch.testing.assert_close(x, ex)
    (region,) = thunder_ext.cuda_graph_report(jfn).not_graphed
    assert "static buffers cannot reproduce that aliasing" in region.reason and region.shared_storage

    y = torch.ones(4, device=cuda_graphs).to(torch.complex64)
    ey = y.clone()
    for b, eb in [(y, ey), (torch._neg_view(x), torch._neg_view(ex)), (y, ey)]:  # graphed, un-graphed, graphed
        torch.testing.assert_close(jfn(x, b), f(ex, eb))
        torch.testing.assert_close((x, y), (ex, ey))
    report = thunder_ext.cuda_graph_report(jfn)  # Thunder compiled the two aliasings apart: one region each
    assert len(report.graphed) == 1 and len(report.not_graphed) == 1


# --- ops that must not be captured ----------------------------------------------------------------------------------
@torch.library.custom_op("thunder_effects_tests::host_sync", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,))
def host_sync(x: torch.Tensor) -> torch.Tensor:
    return x.clone()  # stands for host work a replay would not repeat


_unsafe_ex = thunder_ext.OperatorExecutor("thunder_effects_test_cudagraph_unsafe")
host_sync_op = _unsafe_ex.register_operator("host_sync", meta=lambda x: TensorProxy(like=x), fn=host_sync)


def _around(sync: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    def f(a):
        a.mul_(2)
        b = sync(a)
        b.add_(1)
        return b * 3, a + 1

    return f


def test_cudagraph_unsafe_ops_split_the_graphed_region(cuda_graphs):
    f, eager = _around(host_sync_op), _around(host_sync)

    assert effects.default_registry().lookup(thunder_ext.impl_key(host_sync_op, _unsafe_ex)).uncapturable
    jfn = thunder_ext.jit(f, executors=[_unsafe_ex, "torch"], transforms=[CUDAGraphTransform()])
    a, ea = torch.arange(4.0, device=cuda_graphs), torch.arange(4.0, device=cuda_graphs)
    for _ in range(2):
        torch.testing.assert_close(jfn(a), eager(ea))
        torch.testing.assert_close(a, ea)
    top = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols]
    assert "host_sync" in top and sum(name.startswith("CUDAGraph") for name in top) == 2  # graphed either side
    report = thunder_ext.cuda_graph_report(jfn)
    (split,) = report.not_graphed
    assert split.name == "host_sync" and "cudagraph_unsafe" in split.reason
    assert len(report.graphed) == 2


# --- the report ---------------------------------------------------------------------------------------------------
def test_report_names_static_inputs_and_copied_back_writes(cuda_graphs):
    class Scale(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.full((4,), 2.0), requires_grad=False)

        def forward(self, x):
            x.add_(1)
            return (x * self.w) * 3

    module = Scale().to(cuda_graphs)
    jmodule = thunder_ext.jit(module, executors=["torch"], transforms=[CUDAGraphTransform()])
    x = torch.zeros(4, device=cuda_graphs)
    jmodule(x)
    (region,) = thunder_ext.cuda_graph_report(jmodule).regions
    assert region.graphed and region.reason is None and region.shared_storage == ()
    (static,) = region.static_inputs  # the parameter: used in place, never copied
    (written,) = region.copied_back  # x: written through its private static copy, copied back
    assert set(region.inputs) == {static, written}
    assert str(region).startswith(f"{region.name}: graphed (inputs ")
    assert isinstance(region, thunder_ext.RegionReport)
    with pytest.raises(dataclasses.FrozenInstanceError):
        region.graphed = False  # type: ignore[misc]


def test_a_view_of_a_static_parameter_shares_its_static_base(cuda_graphs):
    """The parameter is static (used in place) alone; passed with a view of it, both become views of one copied
    base, so the write through the view reaches the parameter as in eager."""

    class ScaleView(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.arange(6.0), requires_grad=False)

        def forward(self, x):
            x.mul_(2)
            return (self.w * 1 + x.sum()) * 2

    module, reference = ScaleView().to(cuda_graphs), ScaleView().to(cuda_graphs)
    jmodule = thunder_ext.jit(module, executors=["torch"], transforms=[CUDAGraphTransform()])
    for k, views in enumerate([lambda w: w[1:3], lambda w: w[1:3], lambda w: w[2:4], lambda w: torch.ones_like(w[:2])]):
        torch.testing.assert_close(jmodule(views(module.w)), reference(views(reference.w)))
        torch.testing.assert_close(module.w, reference.w)
        # a writing program's arguments that share storage are one alias group, pinned by its prologue: the
        # unaliased call compiles its own program (and graph) beside the aliased calls' one
        graphed = thunder_ext.cuda_graph_report(jmodule).graphed
        assert len(graphed) == (1 if k < 3 else 2)
        assert bool(graphed[-1].static_inputs) != bool(graphed[-1].shared_storage)  # static alone, copied viewed


def test_storage_layout_patterns():
    from thunder_ext.passes.static_buffers import storage_layout

    x, y = torch.arange(16.0).reshape(4, 4), torch.ones(4)
    assert storage_layout([x, y, 2.0]).pattern == () and storage_layout([x, x.t()]).groups == ((0, 1),)
    rows = storage_layout([x[0:2], x[1:3]])
    assert rows.pattern == storage_layout([x[1:3], x[2:4]]).pattern != storage_layout([x[0:2], x[2:4]]).pattern
    assert rows.spans == ((0, 48),)  # bytes 0..48 of the storage: rows 0 to 2
    mixed = storage_layout([x.view(-1).view(torch.uint8)[1:], x])  # aligned to the widest element: offsets 1 and 0
    assert mixed.pattern == (((0, 1), (1, 0)),) and mixed.reason is None
    z = torch.ones(4, dtype=torch.complex64)
    unbuildable = storage_layout([z, z.conj()], ["a", "b"])
    assert unbuildable.reason.startswith("input b is a conjugate view sharing storage with a")
    assert unbuildable.pattern not in ((), storage_layout([z, z]).pattern)  # never the key of a graphed layout
