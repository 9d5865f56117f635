"""Hypothesis strategies for random :class:`effects.Effects` values, shared by the model and registry tests."""

from __future__ import annotations

from hypothesis import strategies as st

from effects import GLOBAL, IO, OPAQUE, Access, Alias, Effects, OperandEffect, ResourceEffect, comm, rng

accesses = st.sampled_from([Access.READ, Access.WRITE, Access.READ_WRITE])
resources = st.sampled_from([GLOBAL, IO, rng("cpu"), rng("cuda:0"), comm("world"), comm("tp")])
operand_effects = st.builds(OperandEffect, st.integers(0, 5), accesses)
aliases = st.builds(Alias, st.integers(0, 3), st.integers(0, 5), st.booleans())
resource_effects = st.builds(ResourceEffect, resources, st.booleans())

transparent_effects = st.builds(
    Effects,
    operands=st.lists(operand_effects, max_size=6).map(tuple),
    aliases=st.frozensets(aliases, max_size=3),
    resources=st.frozensets(resource_effects, max_size=3),
)
"""Effects that are not opaque (possibly pure)."""

any_effects = st.one_of(transparent_effects, st.just(OPAQUE))
"""Any effects, opaque included."""
