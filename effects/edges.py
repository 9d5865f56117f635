"""The vocabulary of the dependency graph: why one instruction must run before another, and the named sets of
edge kinds that policies follow (after JAX's ``EffectTypeSet`` s: a policy is a set, defined in one place).

=========================  =====================================================================================
set                        meaning
=========================  =====================================================================================
:data:`KEEPS_ALIVE`        DATA, RAW, WAW: a live destination keeps the source live
                           (:func:`effects.live_instructions`); WAR and ORDER only constrain order. WAW is in
                           because a pure write may cover only part of a storage class (a view), so the earlier
                           write can still be read.
:data:`STORAGE_HAZARDS`    RAW, WAR, WAW: both instructions touch one storage class and one of them writes it —
                           moving either across the other changes what is read or what is left behind.
=========================  =====================================================================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["EdgeKind", "Edge", "KEEPS_ALIVE", "STORAGE_HAZARDS"]


class EdgeKind(enum.Enum):
    """Why the source of an edge must run before its destination."""

    DATA = "data"
    """The destination uses a value the source defines."""
    RAW = "raw"
    """Read after write: the destination reads storage the source wrote."""
    WAR = "war"
    """Write after read: the destination overwrites storage the source read."""
    WAW = "waw"
    """Write after write: both write the same storage; the later write must win."""
    ORDER = "order"
    """Both use the same ordered resource (or one is a ``GLOBAL`` barrier)."""
    RETURN = "return"
    """The source is the last write to storage visible after the program returns."""


@dataclass(frozen=True, slots=True)
class Edge:
    """``src`` must run before ``dst`` because of ``kind``, caused by ``cause``."""

    src: int
    dst: int
    kind: EdgeKind
    cause: object
    """The value (DATA), the storage's first-defined value (RAW/WAR/WAW/RETURN) or the Resource (ORDER)."""


KEEPS_ALIVE = frozenset({EdgeKind.DATA, EdgeKind.RAW, EdgeKind.WAW})
"""Edge kinds along which liveness flows (see the module docstring)."""

STORAGE_HAZARDS = frozenset({EdgeKind.RAW, EdgeKind.WAR, EdgeKind.WAW})
"""Edge kinds caused by two accesses to one storage class, at least one of them a write (see the module docstring)."""
