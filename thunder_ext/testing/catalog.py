"""The format of the eager-semantics catalog: a :class:`Program` per short program, grouped in :data:`CLASSES`.

A program is the specification of one behaviour: the function (or a factory of a fresh module), the arguments of
each call, and what eager PyTorch does with them — the exception it raises (:attr:`Program.raises`, on some calls
or all), or nothing, in which case the compiled program must give eager's values. A documented limitation says the
typed error ``thunder_ext`` refuses it with instead (:attr:`Program.refused`). The programs themselves live in
:mod:`.inplace_programs` and :mod:`.state_programs`, written with the decorator :func:`collector` makes and the
argument builders here (:func:`ints`, :func:`randn`, :func:`same`); :mod:`.eager_semantics` gathers them and says
how a call is compared with eager's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["CLASSES", "Program", "collector", "ints", "randn", "same"]

CLASSES: dict[str, str] = {
    "result_type": "in-place result-type errors (`int.add_(0.5)`, `bool.add_(1)`, `out=` of another dtype)",
    "overlap": "partially overlapping operands (`f(x[0:3], x[1:4])` with `a.add_(b)`)",
    "seeding": "seeding the default generator inside the function",
    "module_state": "module attributes rebound in `forward` (`self.count = self.count + 1`)",
    "module_members": "`self.parameters()`, `named_buffers()` iterated in `forward` (by position, zipped with a list)",
    "low_precision": "bf16/fp16 read after an in-place write (torchcompile regions)",
    "untraceable": "`.data =`, `t_`, `out=`, `scatter_reduce_`, `index_fill_`, `index_add_(alpha=)`, `\\|=` on bool, "
                   "`BatchNorm2d(momentum=None)`",
}
"""The classes of bugs the catalog covers, in the order of the README's reliability table: key -> what the class
is."""


@dataclass(frozen=True)
class Program:
    """One program of the catalog: ``build()`` is the function (or a fresh module), ``make(k)`` the fresh arguments
    of call ``k``."""

    cls: str
    name: str
    build: Callable[[], Callable[..., Any]]
    make: Callable[[int], tuple[Any, ...]]
    issue: bool = False
    """One of the programs the class was reported with (the others are variants)."""
    grad: bool = False
    """``.backward()`` of the sum of the floating outputs after each call; gradients compared."""
    calls: int = 2
    cache_hit: bool = True
    """Calls after the first run the compiled entry (no recompilation)."""
    raises: type[BaseException] | None = None
    """The exception eager raises (on the calls of :attr:`raises_on`; every call when that is ``None``)."""
    raises_on: tuple[int, ...] | None = None
    refused: type[BaseException] | None = None
    """``thunder_ext`` refuses the program with this typed error (a documented limitation; eager computes)."""
    tolerance: dict[str, float] = field(default_factory=dict)
    """``torch.testing.assert_close`` tolerances of float32/64 values (default ``rtol=1e-5, atol=1e-6``)."""

    def eager_raises(self, k: int) -> type[BaseException] | None:
        """The exception eager raises on call ``k`` (``None``: eager computes)."""
        return self.raises if self.raises_on is None or k in self.raises_on else None

    @property
    def id(self) -> str:
        return f"{self.cls}/{self.name}"

    def __repr__(self) -> str:
        return self.id


def collector(programs: list[Program]) -> Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """The decorator ``program(cls, make=..., **options)`` that adds the decorated function (or module factory,
    ``module=True``) to ``programs``; the other options are :class:`Program`'s fields."""
    def program(cls: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            factory = options.pop("module", False)
            make = options.pop("make")
            programs.append(Program(cls, fn.__name__, fn if factory else (lambda: fn), make, **options))
            return fn

        return add

    return program


# --- argument builders ----------------------------------------------------------------------------------------------
def ints(n: int = 4, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.arange(n, dtype=dtype)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def same(*args: Any) -> Callable[[int], tuple[Any, ...]]:
    """Arguments built the same way on every call (``args`` are builders)."""
    return lambda k: tuple(a() for a in args)
