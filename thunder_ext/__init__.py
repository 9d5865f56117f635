"""Thunder integration of thunder-effects (needs the ``thunder`` extra: ``lightning-thunder``).

Importing this package first applies :mod:`thunder_ext._compat` so that ``thunder`` imports on torch builds without
named tensors, then imports thunder, then declares the effects of Thunder's symbols in
:func:`effects.default_registry` (:mod:`thunder_ext.declarations`, source ``"thunder_ext"``).

Entry points: :func:`jit` (``thunder.jit`` with the effect-aware pipeline), :func:`install` / :func:`uninstall` /
:func:`enabled` (make plain ``thunder.jit`` use it), :func:`coverage`.
"""

from __future__ import annotations

from . import _compat

_compat.apply()

import thunder  # noqa: E402  (must come after the shim)

import effects  # noqa: E402

from . import declarations  # noqa: E402
from .declarations import coverage, impl_key, key_of  # noqa: E402

_REGISTRATIONS = declarations.register(effects.default_registry())

from . import opaque_torch  # noqa: E402  (declares its operators' effects in the default registry)
from .jit import EffectVerification, enabled, install, jit, uninstall, verify_jitted  # noqa: E402

__all__ = ["thunder", "jit", "install", "uninstall", "enabled", "EffectVerification", "verify_jitted", "coverage",
           "key_of", "impl_key"]

from .plugin import (  # noqa: E402  (executor plugin API)
    CheckEffects,
    DroppedEffectError,
    OperatorExecutor,
    check_executor,
    declare_effects,
    register_implementation,
    register_operator,
)

__all__ += ["OperatorExecutor", "register_operator", "register_implementation", "declare_effects", "check_executor",
            "CheckEffects", "DroppedEffectError"]
