"""Declarations: what every Thunder symbol does to memory and to named resources.

Registry keys and operand numbering (:mod:`.keys`, :mod:`.binding`), the effects of Thunder's own symbols
(:mod:`.declarations`, :mod:`.collectives`), of torch ops without a symbol (:mod:`.opaque_torch`), the resolution of
one bound symbol (:mod:`.resolve`), a Thunder trace as the neutral program (:mod:`.adapter`), and the executor
plugin API with its honesty checks (:mod:`.plugin`, :mod:`.honesty`).
"""
