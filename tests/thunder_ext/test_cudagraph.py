"""CUDA graph transform with in-place ops: writes to non-static arguments are copied back, warm-up never runs on
live (static) buffers. On CPU the CUDA graph API is emulated faithfully enough for the runner's protocol: the
capture records the region without running it on the real inputs, ``replay`` runs it on the static inputs and
writes the results into the static outputs. On a GPU the same tests run for real."""

from __future__ import annotations

import contextlib

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import thunder_ext  # noqa: E402
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
