"""The program every pass of the effect pipeline decides on: a Thunder trace adapted to a neutral program
(:func:`thunder_ext.declare.adapter.adapt`) with the input aliases of the compilation in progress
(:func:`thunder_ext.host.state.current_input_aliases`), and its :class:`effects.DependencyGraph`.

Cost: one adaptation and one graph build, O(bound symbols + operand uses).
"""

from __future__ import annotations

from effects import DependencyGraph

from thunder.core.trace import TraceCtx

from ..declare.adapter import AdaptedTrace, adapt
from ..host.state import current_input_aliases

__all__ = ["adapted", "adapted_graph"]


def adapted(trace: TraceCtx) -> AdaptedTrace:
    """``trace`` adapted with the run's input aliases."""
    return adapt(trace, input_aliases=current_input_aliases())


def adapted_graph(trace: TraceCtx) -> tuple[AdaptedTrace, DependencyGraph]:
    """``trace`` adapted with the run's input aliases, and the dependency graph of its program."""
    view = adapted(trace)
    return view, DependencyGraph.build(view.program)
