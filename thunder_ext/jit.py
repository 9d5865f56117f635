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

This module only configures: the compile options, the executors and the transforms (in the order
:func:`thunder_ext.compilation.transforms` states); how the returned function's calls run — the cache-hit path
first, Thunder's path holding the patches while it compiles — is :mod:`thunder_ext.calls`'s. :func:`install` and
:func:`uninstall` make *every* ``thunder.jit`` use the pipeline.

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

from collections.abc import Callable, Mapping
from typing import Any

import thunder
import thunder.extend as extend

from . import calls, compilation
from .declare import opaque_torch
from .host import patches, state
from .options import check_jit_arguments
from .dynamic_numbers import OPTION as DYNAMIC_OPTION
from .dynamic_shapes import OPTION as DYNAMIC_SHAPES_OPTION
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


def jit(
    fn: Callable[..., Any], /, *, verify: bool = False, reinplace: bool = True, certify_collectives: bool = True,
    compile_options: Mapping[str, Any] | None = None, recompile_warning_after: int | None = DEFAULT_WARN_AFTER,
    dynamic_numbers: bool = True, dynamic_shapes: bool = True, **kwargs: Any,
) -> Callable[..., Any]:
    """``thunder.jit(fn, **kwargs)`` with the effect pipeline (see the module docstring).

    ``skip_inplace_alias_updates`` (default ``True``) controls ``update_aliases`` threading; ``reinplace`` runs
    torch-executor ``op`` + ``copy_`` pairs in place where safe; ``verify`` turns on trace verification;
    ``certify_collectives`` compares every compilation's collective order across ranks
    (:mod:`thunder_ext.passes.certificate`); ``recompile_warning_after`` recompilations (``None``: never) raise a
    :class:`~thunder_ext.recompiles.RecompileWarning` naming the most frequent reason
    (:func:`~thunder_ext.recompiles.explain_recompiles`); ``dynamic_numbers`` makes a Python number that changed
    between calls an input of the trace instead of a constant, after the first recompilation it causes
    (:mod:`thunder_ext.dynamic_numbers`; ``False``: every number stays a constant); ``dynamic_shapes`` does the same
    for tensor sizes (:mod:`thunder_ext.dynamic_shapes`; ``False``: static shapes). Every
    other keyword goes to ``thunder.jit``;
    ``compile_options`` are compile options for executors this package does not know, passed on unchecked.

    Raises:
        JitArgumentError: an argument that cannot be right (:mod:`thunder_ext.options`), named with the fix.
    """
    skip_alias_updates = kwargs.pop("skip_inplace_alias_updates", True)
    check_jit_arguments(fn, {"verify": verify, "reinplace": reinplace, "certify_collectives": certify_collectives,
                             "skip_inplace_alias_updates": skip_alias_updates, "dynamic_numbers": dynamic_numbers,
                             "dynamic_shapes": dynamic_shapes},
                        kwargs, {"recompile_warning_after": recompile_warning_after})
    kwargs.update(compile_options or {})
    transforms = compilation.transforms(list(kwargs.pop("transforms", None) or []), reinplace=reinplace,
                                        verify=verify, certify_collectives=certify_collectives)
    kwargs["executors"] = opaque_torch.executors_with(kwargs.get("executors"))
    kwargs[state.OPTION] = True
    kwargs[WARN_AFTER_OPTION] = recompile_warning_after
    kwargs[DYNAMIC_OPTION] = dynamic_numbers
    kwargs[DYNAMIC_SHAPES_OPTION] = dynamic_shapes
    kwargs[state.OPTION_ALIAS_UPDATES] = not skip_alias_updates
    patches.hook_compilations(calls.rewrap)
    return calls.wrap(thunder.jit(fn, transforms=transforms, skip_inplace_alias_updates=False, **kwargs), verify)
