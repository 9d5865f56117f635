"""Seeding the default generator inside a jitted function: an ordered write to the RNG resource, run on every call.

Thunder's interpreter runs ``torch.default_generator.manual_seed(7)`` natively while it traces, and the trace does
not contain it: the first call draws from the seeded generator (seeded at trace time), every later call from
wherever the generator happens to be. ``torch.manual_seed`` does not trace at all (the interpreter trips over its
``torch._dynamo`` decorator). Eager seeds on every call, so ``torch.rand_like`` after it gives the same numbers
each time.

Each seeding call becomes an operator of :data:`thunder_ext.declare.opaque_torch.executor` whose effect is an **ordered
write to** ``rng[default]`` — the resource every random prim (``uniform``, ``randn``, the schema-derived
``nondeterministic_seeded`` ops) orders on — so it runs on every call, is never dead code, and no draw moves
across it. It is also tagged ``DONT_DCE``: Thunder's autograd split runs Thunder's own DCE, which keeps only
outputs and tagged symbols. The interpreter looks aside to it (:func:`lookasides`, installed by
:mod:`thunder_ext.host.patches`):

* ``torch.manual_seed(seed)`` (also ``torch.random.manual_seed``): every device's default generator;
* ``torch.default_generator.manual_seed(seed)``: the CPU generator (called as a method, the interpreter sees
  ``torch.Generator.manual_seed(generator, seed)``; a stored bound method hashes by generator and method, so its
  entry matches each fresh attribute read). Other generators are seeded natively, as before: no traced random op
  can draw from them.

Both return the generator, as torch does. In a differentiated compilation (an argument requires grad) seeding is
refused (:func:`refuse_under_autograd`, :class:`SeedUnderAutogradError`): Thunder's forward/backward split keeps in
the forward only what produces forward values, so an operation without outputs would run in the backward, after
the draws it should precede. Draws inside torch.compile regions are eager's numbers too: such regions are
compiled with Inductor's ``fallback_random`` (:func:`thunder_ext.passes.fusion.fuse`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from effects import RNG_DEFAULT, make_effects

from thunder.core.interpreter import interpreter_needs_wrap
from thunder.core.prims import OpTags
from thunder.core.proxies import NumberProxy
from thunder.core.trace import TraceCtx

from ..passes.autograd_boundary import differentiated
from ..declare.opaque_torch import executor

__all__ = ["MANUAL_SEED", "DEFAULT_GENERATOR_MANUAL_SEED", "SeedUnderAutogradError", "lookasides",
           "refuse_under_autograd"]

_SEEDS_RNG = make_effects(resources=[RNG_DEFAULT])


def _seed_meta(seed: int | NumberProxy) -> None:
    return None


def _manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def _default_generator_manual_seed(seed: int) -> None:
    torch.default_generator.manual_seed(seed)


MANUAL_SEED = executor.register_operator("thunder_effects_manual_seed", meta=_seed_meta, fn=_manual_seed,
                                         effects=_SEEDS_RNG, tags=[OpTags.DONT_DCE])
"""``torch.manual_seed(seed)`` at run time: an ordered write to ``rng[default]``."""

DEFAULT_GENERATOR_MANUAL_SEED = executor.register_operator(
    "thunder_effects_default_generator_manual_seed", meta=_seed_meta, fn=_default_generator_manual_seed,
    effects=_SEEDS_RNG, tags=[OpTags.DONT_DCE])
"""``torch.default_generator.manual_seed(seed)`` at run time: an ordered write to ``rng[default]``."""


def _recording(op: Any) -> Callable[[Any], Any]:
    def seed(seed: Any) -> Any:
        op(seed)
        return torch.default_generator

    seed.__name__ = seed.__qualname__ = f"record_{op.name}"
    return seed


def _generator_manual_seed(generator: Any, seed: Any) -> Any:
    """``torch.Generator.manual_seed(generator, seed)``, as a method call reaches the interpreter: recorded for the
    default generator; another generator (which no traced random op can draw from) is seeded as before."""
    if generator is torch.default_generator:
        return _recording(DEFAULT_GENERATOR_MANUAL_SEED)(seed)
    return generator.manual_seed(seed)


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (installed by :mod:`thunder_ext.host.patches`): each seeding call records its operator
    instead of seeding while tracing (a method call reaches the interpreter as the unbound method plus the
    generator; a stored bound method, as itself)."""
    return {
        torch.manual_seed: interpreter_needs_wrap(_recording(MANUAL_SEED)),
        torch.Generator.manual_seed: interpreter_needs_wrap(_generator_manual_seed),
        torch.default_generator.manual_seed: interpreter_needs_wrap(_recording(DEFAULT_GENERATOR_MANUAL_SEED)),
    }


class SeedUnderAutogradError(NotImplementedError):
    """Seeding inside a function that is differentiated (see the module docstring)."""


def refuse_under_autograd(computation: TraceCtx) -> None:
    """Raise :class:`SeedUnderAutogradError` if ``computation`` (just acquired) seeds and will be differentiated."""
    if not differentiated(computation):
        return
    for bsym in computation.bound_symbols:
        if bsym.sym in (MANUAL_SEED, DEFAULT_GENERATOR_MANUAL_SEED):
            raise SeedUnderAutogradError(
                f"{bsym.sym.name.removeprefix('thunder_effects_')} inside a jitted function whose arguments require "
                "grad: Thunder's forward/backward split would run it after the random draws it must precede. Seed "
                "before calling the jitted function (or call it with inputs that do not require grad)."
            )
