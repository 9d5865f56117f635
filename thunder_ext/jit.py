"""Entry points: :func:`jit`, and :func:`install` / :func:`uninstall` / :func:`enabled`.

``thunder_ext.jit(fn, **kwargs)`` is ``thunder.jit`` with the effect pipeline (:mod:`thunder_ext.passes`)
turned on
for that function through a compile option (:data:`thunder_ext.host.state.OPTION`), so other ``thunder.jit`` functions
in the process are unaffected. It accepts every ``thunder.jit`` keyword. ``skip_inplace_alias_updates`` keeps its
meaning — thread Thunder's ``update_aliases`` or not — but defaults to ``True``: the dependency graph orders
in-place ops, no SSA threading is needed. Internally Thunder's own option is always left off so that Thunder keeps the
run-time aliasing of the arguments in its cache key (``f(x, y)`` and ``f(x, x.t())`` compile separately) and hands
it to the pipeline, which records it as the program's input aliases instead of rewriting aliased arguments as
reshapes.

A cache hit runs :func:`thunder_ext.host.cache_hit.hit_path`: Thunder's own generated prologues as the guards (shapes,
dtypes, devices, ``requires_grad``, constants, the run-time aliasing of the arguments...), then the computation and
epilogue, in one frame instead of Thunder's eight layers; anything else (no prologue passes, autocast, DDP/FSDP,
a call while Thunder traces) takes Thunder's path, which compiles.

The Thunder patches (:mod:`thunder_ext.host.patches`) are held only while a ``thunder_ext.jit`` function compiles
(Thunder's cache missed; a cache hit touches none of them), or between
:func:`install` and :func:`uninstall`, which make *every* ``thunder.jit`` use the pipeline. What
``add_transform`` makes of a ``thunder_ext.jit`` function (``thunder.distributed.ddp``/``fsdp`` re-jit it with
the same compile options) is wrapped the same way (:data:`thunder_ext.host.patches.ADD_TRANSFORM_HOOK`); before, the
holds its compilations took were never released.

``reinplace=True`` (the default) adds :class:`thunder_ext.passes.inplace_kernels.Reinplace`, which runs ``op`` +
``copy_`` pairs
left to the torch executor as one in-place kernel where the effect graph shows nobody can observe the difference
(fusion executors already do this inside their regions; the transform leaves their regions alone).

``verify=True`` checks, after each compilation, every computation trace against the dependency graph of the first
(:func:`thunder_ext.passes.trace_verification.verify_jitted`), and adds
:class:`~thunder_ext.passes.trace_verification.EffectVerification` to the
transforms, which checks the trace after all optimizations against the trace Thunder starts from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import thunder
import thunder.extend as extend
from thunder.core.module import ThunderModule

from . import compilation
from .declare import opaque_torch
from .host import patches, state
from .host.cache_hit import hit_path
from .host.names import FORWARD_FN
from .options import check_jit_arguments
from .recompiles import DEFAULT_WARN_AFTER, WARN_AFTER_OPTION

__all__ = ["jit", "install", "uninstall", "enabled"]

_installed = False


def install() -> None:
    """Make plain ``thunder.jit`` use the effect pipeline (no ``update_aliases`` threading). Idempotent."""
    global _installed
    if not _installed:
        patches.apply()
        extend.add_default_executor(opaque_torch.executor)
        state.set_global(True)
        _installed = True


def uninstall() -> None:
    """Undo :func:`install`; every patched Thunder function is restored once no ``thunder_ext.jit`` call runs."""
    global _installed
    if _installed:
        state.set_global(False)
        extend.remove_default_executor(opaque_torch.executor)
        patches.restore()
        _installed = False


def enabled() -> bool:
    """Whether :func:`install` is in effect."""
    return _installed


def _held(call: Callable[..., Any], jfn: Any, verify: bool) -> Callable[..., Any]:
    enter, leave = patches.enter_call, patches.exit_call

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        enter()
        try:
            result = call(*args, **kwargs)
        finally:
            compiled = leave()
        if compiled:
            compilation.on_compiled(jfn, verify)
        return result

    return run


def _rewrap(jfn: Any) -> Any:
    """A function ``add_transform`` made from a ``thunder_ext.jit`` function (``ddp``, ``fsdp``: the same compile
    options, more transforms), held over each call like the one it came from; others unchanged."""
    cd = thunder.compile_data(jfn)
    if cd is None or not cd.compile_options.get(state.OPTION):
        return jfn
    transforms = getattr(cd, "transforms", None) or ()  # set by thunder.jit, not a declared CompileData field
    return _hold_calls(jfn, compilation.verifies(transforms))


def _hold_calls(jfn: Any, verify: bool) -> Any:
    """``jfn`` with the patch holds its compilations take released after each call (:func:`_held`), cache hits
    taking :func:`thunder_ext.host.cache_hit.hit_path`."""
    if isinstance(jfn, ThunderModule):
        FORWARD_FN.set(jfn, hit_path(jfn, _held(FORWARD_FN.get(jfn), jfn, verify)))
        return jfn
    return hit_path(jfn, _held(jfn, jfn, verify))


def jit(
    fn: Callable[..., Any], /, *, verify: bool = False, reinplace: bool = True, certify_collectives: bool = True,
    compile_options: Mapping[str, Any] | None = None, recompile_warning_after: int | None = DEFAULT_WARN_AFTER,
    **kwargs: Any,
) -> Callable[..., Any]:
    """``thunder.jit(fn, **kwargs)`` with the effect pipeline (see the module docstring).

    ``skip_inplace_alias_updates`` (default ``True``) controls ``update_aliases`` threading; ``reinplace`` runs
    torch-executor ``op`` + ``copy_`` pairs in place where safe; ``verify`` turns on trace verification;
    ``certify_collectives`` compares every compilation's collective order across ranks
    (:mod:`thunder_ext.passes.certificate`); ``recompile_warning_after`` recompilations (``None``: never) raise a
    :class:`~thunder_ext.recompiles.RecompileWarning` naming the most frequent reason
    (:func:`~thunder_ext.recompiles.explain_recompiles`). Every other keyword goes to ``thunder.jit``;
    ``compile_options`` are compile options for executors this package does not know, passed on unchecked.

    Raises:
        JitArgumentError: an argument that cannot be right (:mod:`thunder_ext.options`), named with the fix.
    """
    skip_alias_updates = kwargs.pop("skip_inplace_alias_updates", True)
    check_jit_arguments(fn, {"verify": verify, "reinplace": reinplace, "certify_collectives": certify_collectives,
                             "skip_inplace_alias_updates": skip_alias_updates}, kwargs,
                        {"recompile_warning_after": recompile_warning_after})
    kwargs.update(compile_options or {})
    transforms = compilation.transforms(list(kwargs.pop("transforms", None) or []), reinplace=reinplace,
                                        verify=verify, certify_collectives=certify_collectives)
    kwargs["executors"] = opaque_torch.executors_with(kwargs.get("executors"))
    kwargs[state.OPTION] = True
    kwargs[WARN_AFTER_OPTION] = recompile_warning_after
    kwargs[state.OPTION_ALIAS_UPDATES] = not skip_alias_updates
    patches.hook_compilations(_rewrap)
    return _hold_calls(thunder.jit(fn, transforms=transforms, skip_inplace_alias_updates=False, **kwargs), verify)
