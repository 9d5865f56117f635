"""The calls of a ``thunder_ext.jit`` function: the cache-hit path first, else Thunder's path, which compiles.

A cache hit runs :func:`thunder_ext.host.cache_hit.hit_path`: Thunder's own generated prologues as the guards (shapes,
dtypes, devices, ``requires_grad``, constants, the run-time aliasing of the arguments...), then the computation and
epilogue, in one frame instead of Thunder's eight layers; anything else (no prologue passes, autocast, DDP/FSDP,
a call while Thunder traces) takes Thunder's path, which compiles.

The Thunder patches (:mod:`thunder_ext.host.patches`) are held only while a ``thunder_ext.jit`` function compiles
(Thunder's cache missed; a cache hit touches none of them): the compile hook takes a hold for a compilation with the
compile option, and the call that missed releases it when it returns (:func:`wrap`), then runs what follows a
compiling call (:func:`thunder_ext.compilation.on_compiled`). What ``add_transform`` makes of a ``thunder_ext.jit``
function (``thunder.distributed.ddp``/``fsdp`` re-jit it with the same compile options) is wrapped the same way
(:func:`rewrap`, applied by :data:`thunder_ext.host.patches.ADD_TRANSFORM_HOOK`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import thunder
from thunder.core.module import ThunderModule

from . import compilation, dynamic_shapes
from .host import patches, state
from .host.cache_hit import hit_path
from .host.names import FORWARD_FN

__all__ = ["wrap", "rewrap"]


def _held(call: Callable[..., Any], jfn: Any, verify: bool) -> Callable[..., Any]:
    """``call`` with the patches held over it; a compilation with dynamic sizes that fails before Thunder caches it
    is made again with static shapes (:func:`thunder_ext.dynamic_shapes.fall_back`), once."""
    enter, leave = patches.enter_call, patches.exit_call

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        entries = dynamic_shapes.cached_entries(jfn)
        enter()
        try:
            result = call(*args, **kwargs)
        except Exception as error:
            if leave() and dynamic_shapes.fall_back(jfn, entries, error):
                return run(*args, **kwargs)
            raise
        if leave():
            compilation.on_compiled(jfn, verify)
        return result

    return run


def rewrap(jfn: Any) -> Any:
    """A function ``add_transform`` made from a ``thunder_ext.jit`` function (``ddp``, ``fsdp``: the same compile
    options, more transforms), held over each call like the one it came from; others unchanged."""
    cd = thunder.compile_data(jfn)
    if cd is None or not cd.compile_options.get(state.OPTION):
        return jfn
    transforms = getattr(cd, "transforms", None) or ()  # set by thunder.jit, not a declared CompileData field
    return wrap(jfn, compilation.verifies(transforms))


def wrap(jfn: Any, verify: bool) -> Any:
    """``jfn`` with the patch holds its compilations take released after each call (:func:`_held`), cache hits
    taking :func:`thunder_ext.host.cache_hit.hit_path`."""
    if isinstance(jfn, ThunderModule):
        FORWARD_FN.set(jfn, hit_path(jfn, _held(FORWARD_FN.get(jfn), jfn, verify)))
        return jfn
    return hit_path(jfn, _held(jfn, jfn, verify))
