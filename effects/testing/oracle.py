"""The differential oracle: run a program and a transformation of it eagerly and compare everything observable.

:func:`execute` is an interpreter over the vocabulary (:mod:`effects.testing.vocab`): it binds fresh inputs from
the case's :class:`~effects.testing.case.InputSpec` (aliasing included) and fresh seeded generators, and runs the
instructions in order. An instruction carrying ``attrs["members"]`` (a fused region made by
:func:`effects.partition.apply_partition`: the member instructions) runs as a unit: its members run in order in a
scope that holds *only* the region's declared inputs, so a missing region input is caught too; regions may nest.

:class:`Oracle` runs the original once and then checks any number of transformations against it: every returned
value and every program input after the call (mutations through aliases are observable there). Comparison is
bitwise (NaNs in the same places count as equal) unless ``rtol``/``atol`` are given: a reordering or partition
runs the very same kernels on the same data, so any difference is a bug. RNG draws come from generators with the
same seeds, so they compare bitwise too. Fake collectives draw their peers' contributions from a channel per
process group, so each group's sequence must be the original's (and is compared as such). The first divergence
raises :class:`Mismatch`, whose message prints the case and the transformation as runnable Python.

:func:`check_pass` is the one-call helper for pass authors: "for all generated programs, my pass preserves
semantics".
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import given
from hypothesis import settings as Settings

from ..errors import EffectError
from ..program import Const, Instruction, Program
from ..partition import Partitioning, apply_partition
from ..schedule import reorder
from .case import Case, RunInputs
from .strategies import programs
from .vocab import GeneratorRef, GroupRef, Indices, aten_caller, spec_for

__all__ = ["Outcome", "Mismatch", "UnknownOpError", "execute", "Oracle", "check_pass", "fresh_may_views"]


class Mismatch(EffectError, AssertionError):
    """A transformed program behaved differently from the original (or failed to run)."""


class UnknownOpError(EffectError, LookupError):
    """The interpreter met an op that is neither in the vocabulary nor a fused region."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run leaves observable: the returned values and every program input as the caller sees them at the
    return, the state of every generator after the run, and each process group's sequence of collectives."""

    returns: tuple[Any, ...]
    inputs: Mapping[str, torch.Tensor]
    generators: Mapping[str, torch.Tensor]
    collectives: Mapping[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    """Per process group, the shapes its collectives reduced, in the order they ran."""


def _resolve(operand: Any, env: Mapping[Hashable, Any], run: RunInputs) -> Any:
    if isinstance(operand, Const):
        value = operand.value
        if isinstance(value, GeneratorRef):
            return run.generators[value.name]
        if isinstance(value, GroupRef):
            return run.channels[value.name]
        return value.tensor() if isinstance(value, Indices) else value
    if isinstance(operand, tuple):
        return tuple(_resolve(o, env, run) for o in operand)
    return env[operand]


def _step(inst: Instruction, env: dict[Hashable, Any], run: RunInputs) -> None:
    members = inst.attrs.get("members")
    if members is not None:
        scope = {v: env[v] for v in inst.input_values()}
        for member in members:
            _step(member, scope, run)
        for v in inst.outputs:
            env[v] = scope[v]
        return
    spec = spec_for(inst.op)
    if spec is not None:
        run_op = spec.run
    elif isinstance(inst.op, torch._ops.OpOverload):
        run_op = aten_caller(inst.op)
    else:
        raise UnknownOpError(
            f"cannot run {inst}: op {inst.op!r} is not in effects.testing.VOCABULARY, not an ATen overload and not "
            "a fused region (attrs['members'] holding the member instructions). A pass under test may reorder, "
            "fuse or delete the vocabulary's instructions and add ATen ones."
        )
    result = run_op(*(_resolve(o, env, run) for o in inst.inputs))
    if len(inst.outputs) == 1:
        env[inst.outputs[0]] = result
    elif inst.outputs:
        env.update(zip(inst.outputs, result, strict=False))


def execute(program: Program, case: Case, *, return_at: int | None = None, inputs: RunInputs | None = None,
            ) -> Outcome:
    """Run ``program`` on fresh inputs built from ``case.inputs`` (or on ``inputs``, made by
    ``case.inputs.materialize(...)``: e.g. bases that require grad).

    ``return_at=k`` returns to the caller after the first ``k`` instructions (the rest still run afterwards, as
    when a compiler places the return early): returned values and inputs are observed at that point.
    """
    run = case.inputs.materialize() if inputs is None else inputs
    env: dict[Hashable, Any] = dict(run.tensors.items())
    insts = program.instructions
    stop = len(insts) if return_at is None else return_at
    for inst in insts[:stop]:
        _step(inst, env, run)
    early = stop < len(insts)
    returns = tuple(_observe(env[v], early) for v in program.returns)
    observed = {name: _observe(t, early) for name, t in run.tensors.items()}
    for inst in insts[stop:]:
        _step(inst, env, run)
    return Outcome(returns, observed, {name: g.get_state() for name, g in run.generators.items()},
                   {name: tuple(c.log) for name, c in run.channels.items()})


def fresh_may_views(case: Case) -> frozenset[tuple[int, int]]:
    """``(instruction, output)`` pairs of ``case.program`` declared *may*-views (``reshape``) that are fresh copies
    when the case runs — what :func:`effects.functionalize` needs as ``fresh_outputs`` to be exact."""
    from ..graph import resolve_effects

    run = case.inputs.materialize()
    env: dict[Hashable, Any] = dict(run.tensors.items())
    fresh = set()
    for index, (inst, eff) in enumerate(zip(case.program.instructions, resolve_effects(case.program), strict=True)):
        _step(inst, env, run)
        for alias in eff.aliases:
            if alias.may and not alias.of_output and not isinstance(inst.inputs[alias.operand], (Const, tuple)):
                out, source = env[inst.outputs[alias.output]], env[inst.inputs[alias.operand]]
                if out.untyped_storage().data_ptr() != source.untyped_storage().data_ptr():
                    fresh.add((index, alias.output))
    return frozenset(fresh)


def _observe(value: Any, copy: bool) -> Any:
    return value.clone() if copy and isinstance(value, torch.Tensor) else value


def _difference(expected: Any, actual: Any, rtol: float, atol: float) -> str | None:
    """Why ``actual`` is not ``expected`` (``None`` when they agree)."""
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
        return None if expected == actual else f"expected {expected!r}, got {actual!r}"
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return (f"expected a {expected.dtype} tensor of shape {tuple(expected.shape)}, got {actual.dtype} "
                f"{tuple(actual.shape)}")
    if rtol or atol:
        close = torch.isclose(expected, actual, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = (expected == actual) | (expected.isnan() & actual.isnan()) if expected.is_floating_point() \
            else expected == actual
    if bool(close.all()):
        return None
    where = tuple(int(i) for i in (~close).nonzero()[0])
    count = int((~close).sum())
    return (f"{count} of {expected.numel()} elements differ; first at index {where}: expected "
            f"{expected[where].item()!r}, got {actual[where].item()!r}")


def _first_divergence(expected: Outcome, actual: Outcome, returns: Sequence[Hashable], rtol: float,
                      atol: float) -> str | None:
    if len(expected.returns) != len(actual.returns):
        return f"the transformed program returns {len(actual.returns)} values, the original {len(expected.returns)}"
    for k, (e, a) in enumerate(zip(expected.returns, actual.returns, strict=True)):
        why = _difference(e, a, rtol, atol)
        if why:
            return f"returned value {k} ({returns[k]}): {why}"
    for name, e in expected.inputs.items():
        why = _difference(e, actual.inputs[name], rtol, atol)
        if why:
            return f"input {name} after the call: {why}"
    for name, e in expected.generators.items():
        if not torch.equal(e, actual.generators[name]):
            return f"generator {name} is in a different state after the call (a different number of draws)"
    for name, e in expected.collectives.items():
        if e != actual.collectives[name]:
            return (f"process group {name} ran a different sequence of collectives (shapes in order): "
                    f"expected {list(e)}, got {list(actual.collectives[name])}")
    return None


class Oracle:
    """Checks transformations of one case against its original run (computed once).

    Raises (from the ``check_*`` methods):
        Mismatch: the transformation fails to run or changes a returned value or an input.
    """

    __slots__ = ("case", "rtol", "atol", "expected")

    def __init__(self, case: Case, *, rtol: float = 0.0, atol: float = 0.0) -> None:
        self.case = case
        self.rtol = rtol
        self.atol = atol
        self.expected = execute(case.program, case)

    def tolerant(self, *, rtol: float, atol: float) -> Oracle:
        """This oracle comparing within ``rtol``/``atol`` (the original's run is shared, not repeated)."""
        other = copy.copy(self)
        other.rtol, other.atol = rtol, atol
        return other

    def check_program(self, transformed: Program, *, what: str = "transformed", return_at: int | None = None) -> None:
        """``transformed`` (same inputs, returns in the same order) must behave exactly like the original;
        ``return_at`` as in :func:`execute`."""
        try:
            actual = execute(transformed, self.case, return_at=return_at)
        except UnknownOpError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the transformed program is a mismatch
            self._fail(transformed, what, f"it raised {type(exc).__name__}: {exc}", return_at)
        why = _first_divergence(self.expected, actual, self.case.program.returns, self.rtol, self.atol)
        if why is not None:
            self._fail(transformed, what, why, return_at)

    def check_order(self, order: Sequence[int]) -> None:
        """The original instructions run in ``order``. If ``order`` also holds the return node (``n``, the
        number of instructions, as in :func:`~effects.testing.schedules` with ``returns=True``), the program
        returns there and the instructions after it run afterwards."""
        n = len(self.case.program.instructions)
        return_at = order.index(n) if n in order else None
        instructions = [i for i in order if i != n]
        where = "" if return_at is None else f", returning after {return_at} instruction(s)"
        self.check_program(reorder(self.case.program, instructions), what=f"reordered {instructions}{where}",
                           return_at=return_at)

    def check_partition(self, partitioning: Partitioning) -> Program:
        """The fused program of ``partitioning`` (regions run as units); returns it for further checks."""
        fused = apply_partition(self.case.program, partitioning)
        sizes = [len(r.members) for r in partitioning.regions]
        self.check_program(fused, what=f"partitioned (region sizes {sizes})")
        return fused

    def _fail(self, transformed: Program, what: str, why: str, return_at: int | None) -> None:
        raise Mismatch(
            f"{what} program diverges from the original: {why}\n\n"
            f"{self.case.to_python(transformed, return_at=return_at)}"
        )


def check_pass(
    transform: Callable[[Program], Program],
    *,
    cases: Any = None,
    settings: Settings | None = None,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> None:
    """Assert that ``transform`` preserves semantics on every generated program (Hypothesis shrinks failures).

    Args:
        transform: a pass ``Program -> Program`` that may reorder, fuse (with ``attrs["members"]``) or delete
            instructions of the vocabulary; it must keep the inputs and the returned values.
        cases: a strategy of :class:`~effects.testing.Case` (default :func:`~effects.testing.programs`).
        settings: Hypothesis settings (default: the active profile).
        rtol, atol: tolerances for passes that change arithmetic (default: bitwise).

    Raises:
        Mismatch: for the shrunk counterexample, printed as runnable Python.
    """
    strategy = programs() if cases is None else cases

    def preserves_semantics(case: Case) -> None:
        Oracle(case, rtol=rtol, atol=atol).check_program(transform(case.program),
                                                          what=getattr(transform, "__name__", "transformed"))

    test = given(strategy)(preserves_semantics)
    (settings(test) if settings is not None else test)()
