"""Small helpers the passes of the core (and of adapters built on it) share; nothing effect-specific."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a pass allocates many small acyclic objects (edge tuples): its
    repeated full scans would otherwise make the pass superlinear. Restores the previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
