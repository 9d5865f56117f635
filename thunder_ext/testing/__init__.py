"""Differential checking of :func:`thunder_ext.jit` against eager PyTorch on generated programs.

:func:`check_jit` turns an :class:`effects.testing.Case` into a plain Python function
(:func:`effects.testing.to_python_function`), runs it eagerly and through ``thunder_ext.jit`` on fresh inputs built
from the same recipe (aliasing included), and compares every returned value and every input after the call.

A program Thunder itself cannot trace is not a bug of the effect pipeline: when ``thunder_ext.jit`` fails *before*
running and stock ``thunder.jit`` fails with the same error, :func:`check_jit` raises :class:`ThunderUnsupported`
(fuzzers count those and move on); any other failure or difference raises :class:`effects.testing.Mismatch` with
the program printed as runnable Python. Needs the ``test`` extra (Hypothesis) for :mod:`effects.testing`.

Beside it, what the tests and the benchmarks both check ``thunder_ext.jit`` against:

* :mod:`.eager_semantics` — the eager-semantics catalog, the specification of where eager raises or rounds
  (its format in :mod:`.catalog`, its programs in :mod:`.inplace_programs` and :mod:`.state_programs`), and
  how a compiled call is compared with eager's;
* :mod:`.models` — four in-place models (BatchNorm training, KV-cache decoder, Adam step, residual MLP) that
  check a compiler against eager, outputs and every mutated tensor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, cast

import torch

import thunder
import effects
from effects.testing import Case, Mismatch, execute, functional_reference, to_python_function

from ..jit import jit

__all__ = ["ThunderUnsupported", "check_jit", "check_jit_grad"]


class ThunderUnsupported(Exception):
    """Stock ``thunder.jit`` cannot trace the program either (same error type and message)."""


def _arguments(tensors: Mapping[str, torch.Tensor], case: Case) -> tuple[torch.Tensor, ...]:
    """The program's arguments from a run's ``tensors`` (a generated program's inputs are names)."""
    return tuple(tensors[cast(str, n)] for n in case.program.inputs)


def _difference(expected: Any, actual: Any) -> str | None:
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, rtol=1e-5, atol=1e-6)
    except AssertionError as error:
        return str(error)
    return None


def _stock_error(fn: Any, case: Case, executors: Sequence[str], fusion_type: str) -> BaseException | None:
    run = case.inputs.materialize()
    try:
        jfn = thunder.jit(fn, executors=list(executors), fusion_type=fusion_type)
        jfn(*_arguments(run.tensors, case))
    except Exception as error:  # noqa: BLE001 - any failure: compared with thunder_ext's below
        return error
    return None


def _failed(error: Exception, fn: Any, case: Case, executors: Sequence[str], fusion_type: str, what: str,
            note: str = "") -> NoReturn:
    """``what`` (a ``thunder_ext.jit`` call) raised ``error``: :class:`ThunderUnsupported` when stock Thunder fails
    on the program with the same error, else :class:`effects.testing.Mismatch` with the program (and ``note``)."""
    stock = _stock_error(fn, case, executors, fusion_type)
    if stock is not None and type(stock) is type(error) and str(stock) == str(error):
        raise ThunderUnsupported(f"{type(error).__name__}: {error}") from error
    raise Mismatch(f"{what} raised {type(error).__name__}: {error}\n(stock thunder.jit: {stock!r})\n\n"
                   f"{case.to_python()}{note}") from error


def check_jit(case: Case, *, executors: Sequence[str] = ("torchcompile",), fusion_type: str = "consecutive") -> None:
    """Eager vs ``thunder_ext.jit(fn, executors=..., fusion_type=...)`` on fresh inputs.

    Raises:
        Mismatch: a returned value or an input differs after the call, or thunder_ext fails where stock
            Thunder does not.
        ThunderUnsupported: stock Thunder fails on the program with the same error.
    """
    fn = to_python_function(case)
    eager = case.inputs.materialize()
    expected = fn(*_arguments(eager.tensors, case))
    fresh = case.inputs.materialize()
    what = f"thunder_ext.jit(executors={list(executors)}, fusion_type={fusion_type!r})"
    try:
        got = jit(fn, executors=list(executors), fusion_type=fusion_type)(*_arguments(fresh.tensors, case))
    except Exception as error:  # noqa: BLE001 - classified by _failed
        _failed(error, fn, case, executors, fusion_type, what)
    why = None if len(got) == len(expected) else f"{len(got)} values returned, expected {len(expected)}"
    for k, (e, g) in enumerate(zip(expected, got, strict=False)):
        why = why or ((d := _difference(e, g)) and f"returned value {k}: {d}")
    for name, e in eager.tensors.items():
        why = why or ((d := _difference(e, fresh.tensors[name])) and f"input {name} after the call: {d}")
    if why:
        raise Mismatch(f"{what} diverges from eager: {why}\n\n{case.to_python()}")


def _unwritten_bases(case: Case) -> list[int]:
    """Input bases no instruction writes (through any input made from them): they may require grad (a leaf
    that requires grad cannot be written in eager, nor a view of one)."""
    graph = effects.DependencyGraph.build(case.program)
    written = set()
    for i in range(graph.n):
        eff, inst = graph.effects(i), case.program.instructions[i]
        positions = range(len(inst.inputs)) if eff.opaque else eff.written
        written |= {graph.storage.storage(v) for k in positions for v in effects.operand_values(inst.inputs[k])}
    bindings = case.inputs.bindings
    return sorted({b.base for b in bindings} - {b.base for b in bindings if graph.storage.storage(b.name) in written})


def _loss(values: Sequence[Any]) -> Any:
    """A fixed, non-uniform weighting of every returned tensor that requires grad (so each element matters)."""
    total = None
    for v in values:
        if isinstance(v, torch.Tensor) and v.requires_grad and v.is_floating_point():
            weight = torch.linspace(-1.0, 2.0, v.numel(), dtype=v.dtype).reshape(v.shape)
            term = (v * weight).sum()
            total = term if total is None else total + term
    return total


def _run_grad(fn: Any, case: Case, grad_bases: Sequence[int], jitted: Any = None) -> tuple[Any, Any, Any]:
    """Returned values, inputs after the call and base gradients of ``jitted`` (or ``fn``; or, given an
    :class:`effects.Functionalized`, of its program interpreted with ATen by :func:`effects.testing.execute`,
    differentiated, then its epilogue applied)."""
    run = case.inputs.materialize(requires_grad=grad_bases)
    if isinstance(fn, effects.Functionalized):
        final_names = tuple(final for _, final in fn.epilogue)
        program = effects.Program(fn.program.instructions, fn.program.inputs, fn.program.returns + final_names)
        values = execute(program, case, inputs=run).returns
        out, finals = values[:len(fn.program.returns)], values[len(fn.program.returns):]
    else:
        out, finals = (jitted or fn)(*_arguments(run.tensors, case)), ()
    loss = _loss(out)
    if loss is not None:
        loss.backward()
    if finals:
        with torch.no_grad():
            for (name, _), final in zip(fn.epilogue, finals, strict=True):
                run.tensors[cast(str, name)].copy_(final)
    detached = [o.detach() if isinstance(o, torch.Tensor) else o for o in out]
    return detached, {n: t.detach() for n, t in run.tensors.items()}, [run.bases[k].grad for k in grad_bases]


def check_jit_grad(case: Case, *, executors: Sequence[str] = ("torch",), fusion_type: str = "consecutive") -> None:
    """Like :func:`check_jit`, with every input base that the program does not write requiring grad: returned
    values, inputs after the call and the gradient of a fixed weighting of the returned values with respect to
    every such base must match eager. Where eager's autograd refuses the program (a value saved for backward was
    modified in place; an in-place write through a view taken before its base came to require grad), the reference
    is the program's functional form (:func:`effects.functionalize` with ATen rules) run eagerly: thunder_ext gives
    the mathematically correct gradient there.

    Raises:
        Mismatch, ThunderUnsupported: as :func:`check_jit`.
    """
    fn = to_python_function(case)
    grad_bases = _unwritten_bases(case)
    try:
        expected = _run_grad(fn, case, grad_bases)
    except RuntimeError as error:  # autograd refuses the mutation: the functional form is the reference
        try:
            expected = _run_grad(functional_reference(case), case, grad_bases)
        except Exception:
            raise error from None  # not autograd's refusal: the program itself fails
    what = f"thunder_ext.jit(executors={list(executors)}, fusion_type={fusion_type!r}) with grads"
    try:
        got = _run_grad(fn, case, grad_bases, jit(fn, executors=list(executors), fusion_type=fusion_type))
    except Exception as error:  # noqa: BLE001 - classified by _failed
        _failed(error, fn, case, executors, fusion_type, what, f"\n(bases requiring grad: {grad_bases})")
    (e_out, e_inputs, e_grads), (g_out, g_inputs, g_grads) = expected, got
    why = None if len(g_out) == len(e_out) else f"{len(g_out)} values returned, expected {len(e_out)}"
    for k, (e, g) in enumerate(zip(e_out, g_out, strict=False)):
        why = why or ((d := _difference(e, g)) and f"returned value {k}: {d}")
    for name, e in e_inputs.items():
        why = why or ((d := _difference(e, g_inputs[name])) and f"input {name} after the call: {d}")
    for k, (e, g) in enumerate(zip(e_grads, g_grads, strict=True)):
        # Thunder's backward is one node for all outputs: an input none of the used outputs depends on gets a zero
        # gradient where eager leaves None (stock Thunder does the same); zeros and None compare equal
        if e is not None or g is not None:
            e, g = (torch.zeros_like(g) if e is None else e), (torch.zeros_like(e) if g is None else g)
            why = why or ((d := _difference(e, g)) and f"gradient of base {k}: {d}")
    if why:
        raise Mismatch(f"{what} diverges from eager: {why}\n\n{case.to_python()}\n(bases requiring grad: {grad_bases})")
