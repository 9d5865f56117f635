"""Python state the interpreter answers as eager does: grad mode, the context managers that set it, tensor metadata.

Thunder's interpreter runs the traced function's Python; what that Python *asks* must get eager's answer, or the
program takes another branch than eager, silently. Three classes of questions got Thunder's answer instead:

* **context managers** (``with torch.no_grad(): with torch.enable_grad(): ...``, ``@torch.enable_grad()``,
  ``with torch.inference_mode():``): their ``__enter__`` stores bookkeeping on the context-manager object
  (``self.prev``, ``self._inference_mode_context``), which the interpreter recorded as the program's attribute
  writes; the epilogue then tried to write them back (an object Thunder cannot locate, or a C guard it cannot
  carry: a typed error where eager runs). The policy is :data:`effects.INTERPRETER_OWNED`: such objects
  belong to the interpreter, so :func:`owned_setattr` (around the interpreter's ``object.__setattr__`` lookaside)
  sets their attributes natively and records nothing — never guarded, never written back.
* **grad mode**, a resource whose semantics the trace carries: Thunder tracks it in its compile data
  (``torch._C._set_grad_enabled`` is a symbol that sets ``is_grad_enabled``; what is made while it is off is tagged
  ``DETACHED_AUTOGRAD_GRAPH``), but ``torch.is_grad_enabled()`` answered the *process's* mode, so ``enable_grad``
  nested in ``no_grad`` restored grad mode *on* at its exit: the rest of the ``no_grad`` block was differentiated.
  :func:`is_grad_enabled` answers the traced mode. Autocast likewise: Thunder traces ``torch.autocast`` blocks
  onto its compile data's autocast stack (the caller's autocast first, part of the cache key), but
  ``torch.is_autocast_enabled("cpu")`` inside ``autocast(enabled=False)`` answered ``True``;
  :func:`is_autocast_enabled` and :func:`get_autocast_dtype` answer the traced state.
  ``torch._C._InferenceMode`` (what ``inference_mode`` enters)
  switched the process into inference mode at trace time and the trace not at all; inside the trace it is
  :class:`TracedInferenceMode`, which turns the traced grad mode off (the values it makes have no autograd
  history, as eager's inference tensors).
* **tensor metadata** (:data:`METADATA`): ``h = w * 1.0; h.requires_grad`` was ``False`` (Thunder's flag of an
  intermediate proxy), so ``if h.requires_grad: h.register_hook(...)`` was skipped; ``t.dtype == torch.long`` and
  ``t.dtype in (torch.long, torch.int)`` were ``False`` (Thunder's dtype object compares unequal to torch's);
  ``t.device`` printed as Thunder's; ``is_leaf``, ``grad_fn`` and ``layout`` were "Unknown attribute".
  The interpreter's reads of them are looked aside (:func:`lookasides`): the properties' getters and
  ``TensorProxy.__getattr__`` for the three it lacks; Thunder's own code, which reads the proxies' properties
  directly, keeps Thunder's dtypes. ``requires_grad`` follows eager's rule (:func:`requires_grad`):
  an argument's own flag; a value made in the trace requires grad when grad mode was on, it is floating point,
  and an operand requires grad — except the outputs of :data:`NO_HISTORY` (``detach``, the ``*_like`` factories).
  ``is_leaf`` is ``not requires_grad`` for a value made in the trace; for an argument that requires grad it is the
  call's tensor's, and the prologue then checks it on every call (:data:`SAME_LEAF`, :func:`leaf_checks`), as it
  checks ``requires_grad`` and ``dtype`` (Thunder's tensor metadata check), so a cache hit never reuses an answer
  that no longer holds. ``grad_fn`` is ``None`` exactly for leaves; otherwise :class:`TracedGradFn`, which answers
  nothing but its identity and says so.

Cost: a dict lookup per ``object.__setattr__`` in the trace; a pass over the bound symbols added since the last
``requires_grad``/``is_leaf`` question (memoized per trace); one prologue check per argument whose leafness was asked.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from effects import interpreter_owned

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.compile_data import get_compile_data
from thunder.core.devices import to_torch_device
from thunder.core.dtypes import to_torch_dtype
from thunder.core.interpreter import WrappedValue, interpreter_needs_wrap, unwrap, wrap_const
from thunder.core.proxies import ProxyTag, TensorProxy
from thunder.core.trace import get_tracectx

from ..host.names import INTERPRET_CALL
from ..declare.opaque_torch import check_operator

__all__ = ["METADATA", "NO_HISTORY", "SAME_LEAF", "TracedInferenceMode", "TracedGradFn", "owned_setattr",
           "is_grad_enabled", "is_autocast_enabled", "get_autocast_dtype", "requires_grad", "torch_device",
           "asking_leaves", "leaf_checks", "lookasides",
           "call_function_ex", "opcode_handlers"]


# --- context managers and grad mode ------------------------------------------------------------------------------
@interpreter_needs_wrap
def _native_setattr(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


def owned_setattr(original: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's ``object.__setattr__`` lookaside (``original``), but an attribute of an interpreter-owned
    object (:func:`effects.interpreter_owned`: a grad-mode or autocast context manager) is set natively: no record,
    no guard, no write-back."""

    def setattr_lookaside(obj: Any, name: Any, value: Any) -> Any:
        if interpreter_owned(unwrap(obj)) or isinstance(unwrap(obj), TracedInferenceMode):
            return _native_setattr(obj, name, value)
        return original(obj, name, value)

    return setattr_lookaside


def is_grad_enabled() -> bool:
    """``torch.is_grad_enabled()`` inside the trace: the traced grad mode (Thunder's compile data), not the
    process's."""
    cd = get_compile_data()
    return torch.is_grad_enabled() if cd is None else cd.is_grad_enabled


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """``torch.is_autocast_enabled(device_type)`` inside the trace: whether the traced autocast state (Thunder's
    compile data: the caller's autocast, part of the cache key, then the ``torch.autocast`` blocks entered in the
    function) casts on ``device_type`` (``None``: CUDA, as torch's legacy form), not the process's state."""
    cd = get_compile_data()
    if cd is None:
        return torch.is_autocast_enabled() if device_type is None else torch.is_autocast_enabled(device_type)
    return cd.autocast_stack.get_dtype_for_device_if_enabled(device_type or "cuda") is not None


def get_autocast_dtype(device_type: str) -> torch.dtype:
    """``torch.get_autocast_dtype(device_type)`` inside the trace: the dtype of the innermost traced autocast state of
    ``device_type``, else the process's."""
    cd = get_compile_data()
    entries = [] if cd is None else [dtype for device, dtype, _ in cd.autocast_stack.stack if device == device_type]
    return to_torch_dtype(entries[-1]) if entries else torch.get_autocast_dtype(device_type)


class TracedInferenceMode:
    """``torch._C._InferenceMode(mode)`` as the trace sees it (interpreted): while entered with ``mode`` true, the
    traced grad mode is off — what inference mode means for the program's values — and the previous mode is restored
    at exit. It goes through ``torch.set_grad_enabled``, so the trace records the mode changes as ``no_grad``'s
    do."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode
        self.prev = True

    def __enter__(self) -> None:
        self.prev = torch.is_grad_enabled()
        if self.mode:
            torch.set_grad_enabled(False)

    def __exit__(self, *exc: Any) -> None:
        torch.set_grad_enabled(self.prev)


def _inference_mode(mode: Any = True) -> Any:
    return INTERPRET_CALL.get()(TracedInferenceMode, mode)


# --- tensor metadata ---------------------------------------------------------------------------------------------
NO_HISTORY: frozenset[Any] = frozenset(sym.id for sym in (
    ltorch.detach, ltorch.zeros_like, ltorch.ones_like, ltorch.empty_like, ltorch.full_like, ltorch.rand_like,
    ltorch.randn_like, ltorch.randint_like))
"""Symbol ids whose outputs eager holds without autograd history whatever their operands: ``detach`` and the
``*_like`` factories (they read only the operand's metadata)."""


class _GradState:
    """The names of the tensors of one trace that eager would hold with autograd history, kept up to date with the
    trace's bound symbols as they are appended (each bound symbol looked at once)."""

    def __init__(self) -> None:
        self.seen = 0
        self.made: set[str] = set()
        self.grad: set[str] = set()

    def update(self, bsyms: list[Any]) -> None:
        if len(bsyms) < self.seen:  # the list was rewritten: start again
            self.seen, self.made, self.grad = 0, set(), set()
        for bsym in bsyms[self.seen:]:
            outs = [o for o in bsym.flat_proxy_outs if isinstance(o, TensorProxy)]
            args = [p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)]
            self.grad.update(p.name for p in args if p.name not in self.made and p.requires_grad)
            self.made.update(o.name for o in outs)
            if bsym.sym.id in NO_HISTORY or any(ProxyTag.DETACHED_AUTOGRAD_GRAPH in o.tags for o in outs):
                continue
            if any(p.name in self.grad for p in args):
                self.grad.update(o.name for o in outs if dtypes.is_inexact_dtype(o.dtype))
        self.seen = len(bsyms)


_grad_states: weakref.WeakKeyDictionary[Any, _GradState] = weakref.WeakKeyDictionary()


def _grad_state() -> _GradState | None:
    trace = get_tracectx()
    if trace is None:
        return None
    state = _grad_states.get(trace)
    if state is None:
        state = _grad_states[trace] = _GradState()
    state.update(trace.bound_symbols)
    return state


def _made_in_trace(t: TensorProxy) -> _GradState | None:
    """The trace's grad state when ``t`` was made in the trace being built (else ``None``: an argument)."""
    state = _grad_state()
    return state if state is not None and t.name in state.made else None


def requires_grad(t: TensorProxy) -> bool:
    """Eager's ``t.requires_grad`` for a tensor of the trace being built (see the module docstring)."""
    state = _made_in_trace(t)
    return t.requires_grad or (state is not None and t.name in state.grad)


class _Questions(threading.local):
    leaves: list[tuple[torch.Tensor, bool]] | None = None
    """The call's tensors (requiring grad) whose leafness the compilation under way asked, with the answer."""


_questions = _Questions()


@contextlib.contextmanager
def asking_leaves() -> Iterator[list[tuple[torch.Tensor, bool]]]:
    """Collect, during one compilation on this thread, the leafness questions :func:`leaf_checks` must guard."""
    outer, _questions.leaves = _questions.leaves, []
    try:
        yield _questions.leaves
    finally:
        _questions.leaves = outer


def _is_leaf(wrapped: WrappedValue) -> bool:
    t = unwrap(wrapped)
    if _made_in_trace(t) is not None or not t.requires_grad:
        return not requires_grad(t)
    tensor = wrapped.original_value
    if not isinstance(tensor, torch.Tensor):
        raise NotImplementedError(
            f"thunder_ext.jit cannot tell whether the tensor {t.name} (it requires grad and does not come from the "
            "call) is a leaf. Ask `is_leaf`/`grad_fn` outside the jitted function.")
    if _questions.leaves is not None and not isinstance(tensor, torch.nn.Parameter):  # a parameter is always a leaf
        _questions.leaves.append((tensor, tensor.is_leaf))
    return tensor.is_leaf


class TracedGradFn:
    """``t.grad_fn`` of a non-leaf tensor inside a trace: not ``None`` (so ``t.grad_fn is None`` is answered as in
    eager), but no autograd node exists at trace time — anything else asked of it is a typed error."""

    def __init__(self, name: str) -> None:
        self._tensor = name

    def __getattr__(self, attr: str) -> Any:
        raise NotImplementedError(
            f"thunder_ext.jit: {self._tensor}.grad_fn.{attr}: the autograd node of a tensor does not exist while "
            "the function is traced; only `grad_fn is None` can be asked inside a jitted function.")


def _eager_attribute(wrapped: WrappedValue, attr: str) -> Any:
    if attr == "layout":
        return torch.strided  # the only layout a TensorProxy has
    leaf = _is_leaf(wrapped)
    if attr == "is_leaf":
        return leaf
    return None if leaf else TracedGradFn(unwrap(wrapped).name)


METADATA: dict[str, Callable[[TensorProxy], Any]] = {
    "requires_grad": requires_grad,
    "dtype": lambda t: dtypes.to_torch_dtype(t.dtype),
    "device": lambda t: to_torch_device(t.device),
}
"""Tensor properties Thunder has, answered as eager's: ``requires_grad`` by eager's rule, ``dtype`` and ``device`` as
torch's objects (so they compare, hash and print like eager's). ``is_leaf``, ``grad_fn`` and ``layout``, which
Thunder lacks, are answered by the ``__getattr__`` lookaside (:data:`_MISSING`)."""

_MISSING = frozenset({"is_leaf", "grad_fn", "layout"})

_PROXY_GETATTR = TensorProxy.__getattr__


def _getattr_lookaside(self: Any, attr: Any) -> Any:
    name = unwrap(attr)
    if name in _MISSING and isinstance(unwrap(self), TensorProxy):
        return wrap_const(_eager_attribute(self, name))
    return _thunder_getattr(self, attr)


_thunder_getattr = interpreter_needs_wrap(_PROXY_GETATTR)


# --- the prologue check of the leafness asked ---------------------------------------------------------------------
def _same_leaf(tensor: torch.Tensor, leaf: bool) -> None:
    if tensor.is_leaf != leaf:
        raise RuntimeError("thunder_effects_same_leaf: the argument's is_leaf differs from the compiled entry's (a "
                           "cache miss, not an error)")



SAME_LEAF = check_operator("thunder_effects_same_leaf", _same_leaf, reads=(0,))
"""``same_leaf(t, leaf)``: a prologue check that argument ``t``'s ``is_leaf`` is what the trace was told."""


def leaf_checks(results: Any, tensors: Mapping[str, torch.Tensor],
                asked: Sequence[tuple[torch.Tensor, bool]]) -> list[Any]:
    """The prologue checks (:data:`SAME_LEAF`, for the prologue of ``results``, Thunder's ``TraceResults``) of every
    tensor of the call (``tensors``: :func:`thunder_ext.python_state.arguments.argument_tensors`, by computation
    argument name)
    whose leafness the computation ``asked`` (:func:`asking_leaves`).

    Raises:
        NotImplementedError: the tensor asked about is not an argument of the call (then nothing could check it on
            later calls).
    """
    if not asked:
        return []
    names = {id(tensor): name for name, tensor in tensors.items()}
    missing = [tensor for tensor, _ in asked if id(tensor) not in names]
    if missing:
        raise NotImplementedError(
            f"thunder_ext.jit cannot check on later calls the leafness (is_leaf/grad_fn) of a tensor of shape "
            f"{tuple(missing[0].shape)} that requires grad and is not an argument of the call. Pass it as an "
            "argument, or ask outside the jitted function.")
    prologue, computation = results.prologue_trace, results.computation_trace
    pro_to_comp = prologue.bound_symbols[-1].args[0][0]
    proxy_of = {c.name: p for c, p in zip(computation.args, pro_to_comp, strict=False) if isinstance(c, TensorProxy)}
    leaves = {names[id(tensor)]: leaf for tensor, leaf in asked}
    return [SAME_LEAF.bind(proxy_of[name], leaf, output=None) for name, leaf in sorted(leaves.items())]


def torch_device(*args: Any, **kwargs: Any) -> torch.device:
    """``torch.device(...)`` inside the trace: torch's device (Thunder's ``torch_device`` checks the arguments), so it
    compares with ``t.device`` (:data:`METADATA`) as in eager. Plain arguments make torch's device directly:
    Thunder knows no device type it cannot run on (``GradScaler.unscale_`` compares with ``"mps:0"``)."""
    if all(isinstance(a, (str, int, torch.device)) for a in (*args, *kwargs.values())):
        return torch.device(*args, **kwargs)
    return to_torch_device(ltorch.torch_device(*args, **kwargs))


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): ``torch.is_grad_enabled``, the autocast queries
    (``is_autocast_enabled``, ``is_autocast_cpu_enabled``, ``get_autocast_dtype``), ``torch._C._InferenceMode``,
    ``torch.device``, the getters of :data:`METADATA` and ``TensorProxy.__getattr__`` (for ``is_leaf``, ``grad_fn``,
    ``layout``)."""
    table: dict[Any, Callable[..., Any]] = {
        torch.is_grad_enabled: interpreter_needs_wrap(is_grad_enabled),
        torch.is_autocast_enabled: interpreter_needs_wrap(is_autocast_enabled),
        torch.is_autocast_cpu_enabled: interpreter_needs_wrap(functools.partial(is_autocast_enabled, "cpu")),
        torch.get_autocast_dtype: interpreter_needs_wrap(get_autocast_dtype),
        torch.device: interpreter_needs_wrap(torch_device),
        torch._C._InferenceMode: _inference_mode,
        _PROXY_GETATTR: _getattr_lookaside,
    }
    table.update({getattr(TensorProxy, name).fget: interpreter_needs_wrap(answer) for name, answer in METADATA.items()})
    return table


# --- calls with a starred iterable ------------------------------------------------------------------------------
def call_function_ex(original: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's ``CALL_FUNCTION_EX`` handler (``f(*args, **kwargs)``), ``original`` behind it: CPython
    turns a starred argument that is not a tuple or list into a tuple first (``f(*(g(i) for i in ...))``, as
    ``torch.nn.utils.parametrize``'s multi-tensor parametrizations call theirs); Thunder's handler takes its length
    ("object of type 'generator' has no len()"). Such an argument is interpreted as ``tuple(args)`` first."""
    def handler(inst: Any, /, stack: Any, **kwargs: Any) -> Any:
        keywords = stack.pop_wrapped() if inst.arg & 0x01 else None
        args = stack.pop_wrapped()
        if not isinstance(unwrap(args), (tuple, list)):
            args = INTERPRET_CALL.get()(tuple, args)
            if not isinstance(args, WrappedValue):  # the iteration raised: the interpreter's signal
                return args
        stack.append(args)
        if keywords is not None:
            stack.append(keywords)
        return original(inst, stack=stack, **kwargs)

    return handler


def opcode_handlers(current: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Replaced entries of the interpreter's opcode handler table (``current``; :mod:`thunder_ext.host.patches`)."""
    return {"CALL_FUNCTION_EX": call_function_ex(current["CALL_FUNCTION_EX"])}
