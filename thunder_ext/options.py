"""The arguments of :func:`thunder_ext.jit`, checked when ``jit`` is called rather than at the first call.

``thunder.jit`` passes every keyword it does not name to the compilation as a *compile option* that some pass may
or may not ask for, so a misspelled option (``fusion_typ="dataflow"``) compiles without it, and most wrong values
fail only at the first call, deep inside a pass. :func:`check_jit_arguments` refuses them up front with a
:class:`JitArgumentError` that names the argument and says what to pass instead:

* the function: something callable (a function or a ``torch.nn.Module``);
* thunder_ext's own switches (``verify``, ``reinplace``, ``certify_collectives``, ``skip_inplace_alias_updates``,
  ``dynamic_numbers``, ``dynamic_shapes``) and
  ``disable_torch_autograd``: a ``bool`` (``verify="no"`` would turn verification on);
* ``recompile_warning_after``: a positive ``int``, or ``None`` (never warn) (:mod:`thunder_ext.recompiles`);
* ``executors``: a list of executors or names of registered executors (a bare string is a sequence of letters);
* ``transforms``: a list of ``thunder`` transforms; ``debug_options``: a ``thunder.DebugOptions``;
* ``fusion_type``: one of :data:`FUSION_TYPES`;
* any other keyword: one of the compile options lightning-thunder 0.2.6 asks for (:data:`THUNDER_COMPILE_OPTIONS`;
  ``tests/thunder_ext/test_options.py`` re-derives that list from Thunder's source, so a Thunder that asks for more
  fails the tests), else an error naming the closest known keyword. Options for a third-party executor that this
  list cannot know go through ``compile_options={...}``, unchecked.

``cache``, ``sharp_edges`` and ``langctx`` are already checked by ``thunder.jit`` when it is called.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import thunder.extend as extend
from thunder.core.options import DebugOptions
from thunder.core.transform_common import Transform

from .passes.cudagraph import SHARE_OUTPUTS_OPTION

__all__ = ["JitArgumentError", "FUSION_TYPES", "THUNDER_COMPILE_OPTIONS", "check_jit_arguments"]


class JitArgumentError(TypeError, ValueError):
    """An argument of :func:`thunder_ext.jit` that cannot be right (a wrong type, an unknown value or keyword).
    Both a ``TypeError`` and a ``ValueError``, so code that catches either of Thunder's late errors still catches it."""


FUSION_TYPES = ("dataflow", "consecutive")
"""The partitioning strategies (``fusion_type=``): regions of non-adjacent ops, or of consecutive ones only."""

THUNDER_COMPILE_OPTIONS = frozenset({
    "fusion_type", "torch_compile_fullgraph", "use_cudagraphs", "disable_inplace_copy_check",
    "is_differentiable_outputs", "thunderfx_disable_split_autograd", "auto_recompute_intermediates",
    "disable_replace_uniform", "sdpa_debug", "use_apex_cross_entropy", "cudnn_sdpa_bwd_may_cat_grad_qkv",
    "nv_enable_options", "nv_disable_options", "nv_skip_cache", "nv_enable_linear", "nv_enable_matmul",
    "nv_enable_sdpa", "nv_enable_embedding", "nv_enable_scatter", "nv_store_fusion_inputs", "nv_save_fake_inputs",
    "nv_enable_shape_only_fusion",
})
"""The compile options lightning-thunder 0.2.6 itself asks for (``get_compile_option``, ``compile_options.get``)."""

THUNDER_JIT_KEYWORDS = frozenset({"langctx", "executors", "sharp_edges", "cache", "disable_torch_autograd",
                                  "transforms", "debug_options"})
"""``thunder.jit``'s named keywords."""

OWN_SWITCHES = ("verify", "reinplace", "certify_collectives", "skip_inplace_alias_updates", "dynamic_numbers",
                "dynamic_shapes")
"""``thunder_ext.jit``'s own keywords (all ``bool``)."""

OWN_COMPILE_OPTIONS = (SHARE_OUTPUTS_OPTION,)
"""thunder_ext's own compile options a user may pass (all ``bool``): the CUDA graph runner's shared static outputs."""

OWN_LIMITS = ("recompile_warning_after",)
"""``thunder_ext.jit``'s own counts (a positive ``int`` or ``None``)."""


def check_jit_arguments(fn: Any, switches: Mapping[str, Any], kwargs: Mapping[str, Any],
                        limits: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`JitArgumentError` for the first argument of ``thunder_ext.jit(fn, **switches, **limits,
    **kwargs)`` that cannot be right; ``switches`` and ``limits`` are thunder_ext's own keywords (:data:`OWN_SWITCHES`,
    :data:`OWN_LIMITS`), ``kwargs`` the ones for ``thunder.jit``."""
    if not callable(fn):
        raise JitArgumentError(f"thunder_ext.jit(fn): fn must be a function or a torch.nn.Module to compile, got "
                               f"{type(fn).__name__} {fn!r}")
    _check_keywords(kwargs)
    for name, value in {**switches, **_present(kwargs, "disable_torch_autograd", *OWN_COMPILE_OPTIONS)}.items():
        if not isinstance(value, bool):
            raise JitArgumentError(f"thunder_ext.jit({name}=...): expected True or False, got {type(value).__name__} "
                                   f"{value!r}")
    for name, value in (limits or {}).items():
        if value is not None and (type(value) is not int or value < 1):
            raise JitArgumentError(f"thunder_ext.jit({name}=...): expected a positive int, or None for never, got "
                                   f"{type(value).__name__} {value!r}")
    if kwargs.get("fusion_type") is not None and kwargs["fusion_type"] not in FUSION_TYPES:
        raise JitArgumentError(f"thunder_ext.jit(fusion_type={kwargs['fusion_type']!r}): expected one of "
                               f"{', '.join(map(repr, FUSION_TYPES))}")
    _check_executors(kwargs.get("executors"))
    _check_sequence("transforms", kwargs.get("transforms"), Transform, "a thunder transform "
                    "(thunder.core.transform_common.Transform)")
    debug = kwargs.get("debug_options")
    if debug is not None and not isinstance(debug, DebugOptions):
        raise JitArgumentError(f"thunder_ext.jit(debug_options=...): expected a thunder.DebugOptions, got "
                               f"{type(debug).__name__} {debug!r}")


def _present(kwargs: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {name: kwargs[name] for name in names if name in kwargs}


def _check_keywords(kwargs: Mapping[str, Any]) -> None:
    known = THUNDER_JIT_KEYWORDS | THUNDER_COMPILE_OPTIONS | set(OWN_COMPILE_OPTIONS)
    for name in kwargs:
        if name not in known:
            hint = _did_you_mean(name, known | set(OWN_SWITCHES) | set(OWN_LIMITS))
            raise JitArgumentError(
                f"thunder_ext.jit({name}=...): unknown keyword; {hint}Keywords are thunder_ext's "
                f"({', '.join(OWN_SWITCHES + OWN_LIMITS)}), thunder.jit's ({', '.join(sorted(THUNDER_JIT_KEYWORDS))}) "
                "and the compile options Thunder asks for; pass an option for another executor as "
                f"compile_options={{{name!r}: ...}}"
            )


def _check_executors(executors: Any) -> None:
    if isinstance(executors, str):
        raise JitArgumentError(f"thunder_ext.jit(executors={executors!r}): expected a list of executors or their "
                               f"names, got a string; pass executors=[{executors!r}]")
    _check_sequence("executors", executors, (extend.Executor, str), "an executor or the name of a registered one")
    names = {ex.name for ex in extend.get_all_executors()}
    for ex in executors or ():
        if isinstance(ex, str) and ex not in names:
            hint = _did_you_mean(ex, names)
            raise JitArgumentError(f"thunder_ext.jit(executors=[..., {ex!r}, ...]): no executor of that name is "
                                   f"registered; {hint}Registered: {', '.join(sorted(names))}")


def _did_you_mean(name: str, choices: Collection[str]) -> str:
    """``"did you mean 'x'? "`` for the closest of ``choices`` to ``name``, or nothing."""
    close = difflib.get_close_matches(name, sorted(choices), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _check_sequence(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> None:
    if value is None:
        return
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise JitArgumentError(f"thunder_ext.jit({name}=...): expected a list, each item {what}; got "
                               f"{type(value).__name__} {value!r}")
    for item in value:
        if not isinstance(item, kind):
            raise JitArgumentError(f"thunder_ext.jit({name}=[..., {item!r}, ...]): each item must be {what}, got "
                                   f"{type(item).__name__}")
