"""A torch.compile region called straight into Inductor's code while its calls match the first one.

Thunder's torch.compile executors hand each fusion region to ``torch.compile``, so every call of a region runs
Dynamo's frame hook and guards: per tensor argument a ``TENSOR_MATCH`` and (torch 2.13) a dimension-marking guard
of five ``hasattr`` calls. On the optimizer update of a small GPT (141 tensors) that is ~0.3 ms a call, for checks
Thunder's prologue has made already (but for strides and dispatch keys). A region is a straight line of torch calls
that Thunder generated, so it does not need Dynamo to be captured: :class:`DirectRegion` compiles it on its first
call with ``make_fx`` on fake copies of the arguments (nothing runs twice, nothing draws random numbers) and
Inductor's ``compile_fx`` (AOTAutograd and Inductor: Dynamo's default backend, with the same options), and on every
later call checks what Dynamo would have guarded for that graph — in C++, a few microseconds — before calling it:

* each argument's type, dispatch keys, dtype, device, sizes, strides and ``requires_grad`` (``TensorGuards``);
* the global state Dynamo guards (``GlobalStateGuard``: grad mode, autocast, deterministic algorithms, default
  dtype, threads...), inference mode, and that no torch-function or dispatch mode is active (a default device set
  by ``torch.set_default_device`` is a torch-function mode);
* the same tensor in the places it was passed twice (AOTAutograd compiled one input for both), and for a region that
  writes (a mutable ATen op in its graph) the same sharing of storage among the arguments as when compiled — where
  only the same tensor passed twice may share storage: AOTAutograd compiled the writes for arguments that do not
  otherwise alias.

The first call that fails a check goes to ``torch.compile`` (Dynamo's guards, recompiles and automatic dynamic
shapes), and so does every later call: a region whose calls vary is Dynamo's. A region this cannot compile is
``torch.compile``'s from its first call, with the reason kept on it (:attr:`DirectRegion.dynamo_reason`): an
argument or output that is not a tensor (or not strided), two arguments on one storage when the region writes, a
torch.compile ``mode`` other than the default, an active mode, a graph that reads a tensor as a Python number, or a
graph ``make_fx`` or Inductor fails on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch._C._dynamo.guards import GlobalStateGuard

from ..host.tensor_checks import TensorMatch, describable
from ..python_state.arguments import storage_pattern

__all__ = ["DirectRegion", "direct_or_dynamo"]

_log = logging.getLogger(__name__)


def direct_or_dynamo(fn: Callable[..., Any], options: Mapping[str, Any] | None, *, direct: bool = True,
                     **kwargs: Any) -> Any:
    """What ``torch.compile(fn, **kwargs)`` returns for a fusion region, with Inductor ``options``: a
    :class:`DirectRegion` when ``direct`` and the call asks for Inductor in its default mode, else torch.compile's
    function."""
    dynamo = torch.compile(fn, **_with_options(kwargs, options))
    if not direct or kwargs.get("backend", "inductor") != "inductor" or kwargs.get("mode") not in (None, "default"):
        return dynamo
    return DirectRegion(fn, dynamo, dict(options or {}))


def _with_options(kwargs: Mapping[str, Any], options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``kwargs`` with Inductor ``options`` added (torch.compile refuses a mode and options together: a mode of
    ``None`` is dropped)."""
    if not options or kwargs.get("mode") is not None:
        return dict(kwargs)
    merged = {k: v for k, v in kwargs.items() if k != "mode"}
    merged["options"] = {**(kwargs.get("options") or {}), **options}
    return merged


class _Checks:
    """What a call must share with the compiling call for the compiled code to be the region's (module docstring)."""

    __slots__ = ("tensors", "state", "inference", "sharing")

    def __init__(self, args: Sequence[torch.Tensor], writes: bool) -> None:
        self.tensors = TensorMatch(args)
        self.state = GlobalStateGuard()
        self.inference = torch.is_inference_mode_enabled()
        self.sharing = storage_pattern(args) if writes else None
        """For a region that writes, the storage pattern it was compiled for."""

    def hold(self, args: Sequence[Any]) -> bool:
        return (self.state.check() and self.tensors.holds(args) and not _modes_active()
                and torch.is_inference_mode_enabled() == self.inference
                and (self.sharing is None or storage_pattern(args) == self.sharing))

    def mismatch(self, args: Sequence[Any]) -> str:
        """What in ``args`` (a call that does not :meth:`hold`) differs from the compiling call."""
        if not self.state.check():
            return f"global state: {self.state.reason()}"
        if not self.tensors.holds(args):
            return self.tensors.mismatch(args)
        if _modes_active():
            return "a torch-function or dispatch mode is active"
        if torch.is_inference_mode_enabled() != self.inference:
            return "inference mode"
        return "arguments share storage unlike when compiled, and the region writes"


def _modes_active() -> bool:
    return torch._C._len_torch_function_stack() > 0 or torch._C._len_torch_dispatch_stack() > 0


class _Compiled:
    """Inductor's code for the region, the checks a call must pass to run it, and the type the region returns."""

    __slots__ = ("code", "checks", "returns")

    def __init__(self, code: Callable[..., Sequence[torch.Tensor]], checks: _Checks, returns: type) -> None:
        self.code, self.checks, self.returns = code, checks, returns

    def __call__(self, args: tuple[Any, ...]) -> Any:
        return self.returns(self.code(*args))


class DirectRegion:
    """A fusion region's callable (module docstring): Inductor's code behind :class:`_Checks` after the first call
    compiled it, ``dynamo`` (torch.compile's function of the region) otherwise."""

    def __init__(self, fn: Callable[..., Any], dynamo: Callable[..., Any], options: dict[str, Any]) -> None:
        self._fn, self._dynamo, self._options = fn, dynamo, options
        self._compiled: _Compiled | None = None
        self.dynamo_reason: str | None = None
        """Why the region's calls go to torch.compile (``None`` while they go to Inductor's code directly, or
        before the first call)."""

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        if compiled is None and self.dynamo_reason is None:
            compiled = self._compile(args)
        elif compiled is not None and not compiled.checks.hold(args):
            compiled = self._to_dynamo("a call did not match the first: " + compiled.checks.mismatch(args))
        return self._dynamo(*args) if compiled is None else compiled(args)

    @property
    def direct(self) -> bool:
        """Whether the region's calls run Inductor's code without Dynamo (after its first call)."""
        return self._compiled is not None

    def _compile(self, args: tuple[Any, ...]) -> _Compiled | None:
        """Compile for ``args`` without Dynamo; ``None`` (and :attr:`dynamo_reason`) where that cannot be done."""
        reason = _unsupported(args)
        if reason is not None:
            return self._to_dynamo(reason)
        try:
            graph = _capture(self._fn, args)
        except _Unsupported as why:
            return self._to_dynamo(str(why))
        except Exception as error:  # noqa: BLE001 - any capture failure leaves the region to Dynamo, reason kept
            return self._to_dynamo(f"make_fx failed: {type(error).__name__}: {error}")
        writes, outputs = _writes(graph), _outputs(graph)
        if outputs is None:
            return self._to_dynamo("an output is not a tensor")
        if writes and not all(args[i] is args[first] for i, first in enumerate(storage_pattern(args))):
            return self._to_dynamo("two arguments share storage and the region writes")
        from torch._inductor.compile_fx import compile_fx

        try:
            code = compile_fx(graph, list(args), config_patches=self._options or None)
        except Exception as error:  # noqa: BLE001 - Dynamo's capture may compile where this one does not
            return self._to_dynamo(f"Inductor failed on the captured graph: {type(error).__name__}: {error}")
        returns = tuple if isinstance(outputs, tuple) else list
        self._compiled = _Compiled(code, _Checks(args, writes), returns)  # type: ignore[arg-type]
        return self._compiled

    def _to_dynamo(self, reason: str) -> _Compiled | None:
        """Leave this call and every later one to torch.compile, for ``reason``; no compiled code (``None``)."""
        self.dynamo_reason, self._compiled = reason, None
        _log.debug("fusion region %s goes to torch.compile: %s", getattr(self._fn, "__name__", self._fn), reason)
        return None


def _unsupported(args: tuple[Any, ...]) -> str | None:
    if not all(isinstance(a, torch.Tensor) for a in args):
        return "an argument is not a tensor"
    if not describable(args):
        return "an argument is not a strided tensor (sparse, nested)"
    if _modes_active():
        return "a torch-function or dispatch mode is active"
    return None


def _capture(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> torch.fx.GraphModule:
    """The region's ATen graph, traced on fake copies of ``args`` (nothing runs), with Dynamo's rewrite of
    ``torch.addcdiv`` with a tensor ``value`` (:class:`_TensorValue`). A graph that still reads a tensor's value
    as a Python number (``item``) cannot be compiled this way."""
    from torch.fx.experimental.proxy_tensor import make_fx

    with _TensorValue():
        graph = make_fx(fn, tracing_mode="fake")(*args)
    if any(n.target is torch.ops.aten._local_scalar_dense.default for n in graph.graph.nodes):
        raise _Unsupported("the region reads a tensor as a Python number")
    return graph


class _Unsupported(Exception):
    """A captured graph this module does not compile (the message says why)."""


class _TensorValue(torch.overrides.TorchFunctionMode):
    """``torch.addcdiv(a, b, c, value=v)`` with a tensor ``v`` as ``a + (b / c) * v``, the decomposition Dynamo
    makes (``handle_addcdiv`` in ``torch/_dynamo/variables/torch.py``) so that ``v`` stays a tensor: its schema
    takes a Python number, which tracing can only read as ``item`` (Adam's step size is a tensor when ``lr`` is)."""

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.addcdiv and len(args) == 3 and kwargs.keys() == {"value"} \
                and isinstance(kwargs["value"], torch.Tensor):
            return torch.add(args[0], torch.mul(torch.div(args[1], args[2]), kwargs["value"]))
        return func(*args, **kwargs)


def _writes(graph: torch.fx.GraphModule) -> bool:
    return any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
               for n in graph.graph.nodes if n.op == "call_function")


def _outputs(graph: torch.fx.GraphModule) -> Sequence[Any] | None:
    """The graph's outputs as the region returns them (a tuple or a list), or ``None`` when one is not a tensor."""
    (returned,) = graph.graph.find_nodes(op="output")[0].args
    if not isinstance(returned, (tuple, list)):
        return None
    if not all(isinstance(o, torch.fx.Node) and isinstance(o.meta.get("val"), torch.Tensor) for o in returned):
        return None
    return returned
