"""Thunder integration of thunder-effects (needs the ``thunder`` extra: ``lightning-thunder``).

Importing this package first applies :mod:`thunder_ext._compat` so that ``thunder`` imports on torch builds without
named tensors, then imports thunder.
"""

from __future__ import annotations

from . import _compat

_compat.apply()

import thunder  # noqa: E402  (must come after the shim)

__all__ = ["thunder"]
