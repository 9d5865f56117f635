"""Thunder integration of thunder-effects (needs the ``thunder`` extra: ``lightning-thunder``).

Importing this package first applies :mod:`thunder_ext.host.compat` so that ``thunder`` imports on torch builds without
named tensors (and without Thunder's import-time warning about an absent optional executor), then imports thunder,
then declares the effects of Thunder's symbols in :func:`effects.default_registry`
(:mod:`thunder_ext.declare.declarations`, source ``"thunder_ext"``). Importing :mod:`thunder_ext.declare.opaque_torch`
and :mod:`thunder_ext.passes.inplace_kernels` (through :mod:`thunder_ext.jit`) declares their operators there too.

* Users: :func:`jit` (``thunder.jit`` with the effect-aware pipeline), :func:`install` / :func:`uninstall` /
  :func:`enabled` (make plain ``thunder.jit`` use it), :class:`EffectVerification` / :func:`verify_jitted`,
  :class:`Reinplace`, :func:`coverage` (how Thunder's symbols got their effects), :class:`CollectiveOrderError`
  (ranks whose compiled collectives differ, :mod:`thunder_ext.passes.certificate`), :func:`cuda_graph_report` (what the
  CUDA graph transform graphed, copied and split, :mod:`thunder_ext.passes.cudagraph`), :func:`explain_recompiles`
  (why a function compiled again: :class:`RecompileReason`; :class:`RecompileWarning` past its limit,
  :mod:`thunder_ext.recompiles`).
* Executor authors: :class:`OperatorExecutor`, :func:`register_operator`, :func:`register_implementation`,
  :func:`declare_effects` (:mod:`thunder_ext.declare.plugin`), :func:`check_executor`, :class:`CheckEffects`
  (:mod:`thunder_ext.declare.honesty`).

The module map, with what each module owns and may import, is ``docs/architecture.md``.
"""

from __future__ import annotations

from .host import compat

compat.apply()
compat.quiet_thunder_import()

import thunder  # noqa: E402  (must come after the shim)

import effects  # noqa: E402

from .declare import declarations  # noqa: E402

_REGISTRATIONS = declarations.register(effects.default_registry())

from .passes import functionalize  # noqa: E402,F401  (declares its write-back operator at import)
from .passes.certificate import CollectiveOrderError  # noqa: E402
from .passes.cudagraph import CudaGraphFallback  # noqa: E402
from .passes.cudagraph_report import CudaGraphReport, RegionReport, cuda_graph_report  # noqa: E402
from .declare.declarations import coverage  # noqa: E402
from .declare.honesty import CheckEffects, check_executor  # noqa: E402
from .jit import enabled, install, jit, uninstall  # noqa: E402
from .options import JitArgumentError  # noqa: E402
from .recompiles import RecompileReason, RecompileWarning, explain_recompiles  # noqa: E402
from .declare.keys import impl_key, key_of  # noqa: E402
from .declare.declaration_checks import DroppedEffectError  # noqa: E402
from .declare.plugin import (  # noqa: E402
    OperatorExecutor,
    declare_effects,
    register_implementation,
    register_operator,
)
from .passes.inplace_kernels import Reinplace  # noqa: E402
from .passes.trace_verification import EffectVerification, verify_jitted  # noqa: E402

__all__ = [
    "thunder",
    # users
    "jit", "install", "uninstall", "enabled", "EffectVerification", "verify_jitted", "Reinplace", "coverage",
    "key_of", "impl_key", "CollectiveOrderError", "cuda_graph_report", "CudaGraphReport", "RegionReport",
    "CudaGraphFallback", "JitArgumentError", "explain_recompiles", "RecompileReason", "RecompileWarning",
    # executor authors
    "OperatorExecutor", "register_operator", "register_implementation", "declare_effects", "check_executor",
    "CheckEffects", "DroppedEffectError",
]
