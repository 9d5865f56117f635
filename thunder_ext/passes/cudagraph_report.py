"""What the effect-aware CUDA graph runner decided, kept on its runner, and the report read from it
(:func:`cuda_graph_report`).

Every decision of :mod:`thunder_ext.passes.cudagraph` is inspectable: per graphed region its inputs, the static
ones, the written ones copied back and the groups sharing one static base, for the region's latest call; per op or
region not graphed, the reason. The runner runs on every call, long after the compilation released the patches, so
its state lives on the runner object itself (:data:`thunder_ext.host.names.RUNNER`, a :class:`RunnerState`): the
written inputs of each graph, the :class:`Plan` of each cache entry (what is copied in and back around a replay,
with its :class:`RegionReport`), the latest decision per region and the ops the partition split out. The report
only reads that state, in region order.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..host.names import RUNNER

__all__ = ["RegionReport", "CudaGraphReport", "cuda_graph_report", "Plan", "RunnerState", "runner_state"]


@dataclass(frozen=True, slots=True)
class RegionReport:
    """What the CUDA graph transform decided for one region (or one op it split out)."""

    name: str
    """The region's name (``CUDAGraph1``), or the op split out of a region."""
    graphed: bool
    inputs: tuple[str, ...] = ()
    static_inputs: tuple[str, ...] = ()
    """Inputs used in place (parameters, static memory): never copied."""
    copied_back: tuple[str, ...] = ()
    """Written inputs that are not static: copied back into the caller's tensors after each replay (an input in
    ``shared_storage`` with the whole static base of its group, so the other members see the write)."""
    shared_storage: tuple[tuple[str, ...], ...] = ()
    """Groups of inputs that shared storage on the region's latest call: each group is views of one static base."""
    reason: str | None = None
    """Why the region (or op) was not graphed."""

    def __str__(self) -> str:
        if not self.graphed:
            return f"{self.name}: not graphed ({self.reason})"
        parts = [f"inputs {', '.join(self.inputs) or '-'}", f"static {', '.join(self.static_inputs) or '-'}",
                 f"copied back {', '.join(self.copied_back) or '-'}"]
        if self.shared_storage:
            parts.append("shared storage " + "; ".join("=".join(group) for group in self.shared_storage))
        return f"{self.name}: graphed ({'; '.join(parts)})"


@dataclass(frozen=True, slots=True)
class CudaGraphReport:
    """The per-region decisions of every CUDA graph transform of a jitted function (:func:`cuda_graph_report`)."""

    regions: tuple[RegionReport, ...] = ()

    @property
    def graphed(self) -> tuple[RegionReport, ...]:
        return tuple(r for r in self.regions if r.graphed)

    @property
    def not_graphed(self) -> tuple[RegionReport, ...]:
        return tuple(r for r in self.regions if not r.graphed)

    def region(self, name: str) -> RegionReport:
        """The report of the region (or split-out op) called ``name``."""
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"no CUDA graph region or split-out op named {name!r}; "
                       f"known: {', '.join(r.name for r in self.regions) or 'none'}")

    def __str__(self) -> str:
        return "\n".join(map(str, self.regions)) or "no CUDA graph regions (not called yet, or no CUDAGraphTransform)"


# --- the runner's decisions ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class Plan:
    """How one cache entry (region, static mask, argument descriptor, alias pattern) runs."""

    report: RegionReport
    copy_in: tuple[int, ...] = ()
    """Positions copied alone into their static buffer before each replay (Thunder's copy)."""
    copy_back: tuple[int, ...] = ()
    """Positions copied alone back into the caller's argument after each replay."""
    bases_in: tuple[tuple[int, int, torch.Tensor], ...] = ()
    """(position of a member, its byte offset in the base, static base): shared storage copied in as one byte
    range, found on each call from where that member starts (the pattern fixes the rest)."""
    bases_back: tuple[tuple[int, int, torch.Tensor], ...] = ()


@dataclass(slots=True)
class RunnerState:
    """What an effect-aware runner knows (:data:`thunder_ext.host.names.RUNNER`)."""

    share_outputs: bool
    written: dict[str, frozenset[int]] = field(default_factory=dict)
    """Graph name -> positions of the inputs it writes (filled on first call)."""
    plans: dict[Hashable, Plan] = field(default_factory=dict)
    """Cache key -> how that graph runs."""
    latest: dict[str, RegionReport] = field(default_factory=dict)
    """Graph name -> the decision of its latest call."""
    split: dict[str, RegionReport] = field(default_factory=dict)
    """Ops split out of graphed regions at partition time, by label."""


def runner_state(runner: Any) -> RunnerState:
    """The effect-aware state of ``runner`` (made on first use)."""
    state = RUNNER.get(runner)
    if state is None:
        state = RunnerState(False)
        RUNNER.put(runner, state)
    return state


def cuda_graph_report(jfn: Any) -> CudaGraphReport:
    """The CUDA graph decisions of a ``thunder_ext.jit`` (or ``thunder.jit``) function or module so far: one entry
    per op split out of a graphed region (compile time), then one per region called (its latest call).

    >>> import thunder_ext
    >>> print(cuda_graph_report(thunder_ext.jit(lambda x: x + 1)))
    no CUDA graph regions (not called yet, or no CUDAGraphTransform)
    """
    import thunder
    from thunder.transforms.cudagraph import CUDAGraphTransform

    cd = thunder.compile_data(jfn)
    transforms = [t for t in (getattr(cd, "transforms", None) or ()) if isinstance(t, CUDAGraphTransform)]
    regions: list[RegionReport] = []
    for transform in transforms:
        state = RUNNER.get(transform.cuda_graph_runner)
        if state is not None:
            regions += state.split.values()
            regions += (state.latest[name] for name in sorted(state.latest, key=_region_order))
    return CudaGraphReport(tuple(regions))


def _region_order(name: str) -> tuple[int, str]:
    digits = name[len(name.rstrip("0123456789")):]
    return (int(digits) if digits else 0, name)
