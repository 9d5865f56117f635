"""Passes: trace in, trace out, driven by the effect graph.

The autograd split (:mod:`.split`), functionalization for autograd (:mod:`.functionalize`), partitioning, DCE,
rematerialization, wait sorting and torch.compile fusion (:mod:`.partition`, :mod:`.dce`, :mod:`.remat`,
:mod:`.waits`, :mod:`.fusion`, all on :mod:`.effect_view`; with the region splits of :mod:`.inductor_guard` and
:mod:`.rounding`), CUDA graphs (:mod:`.cudagraph`), in-place kernels on the torch executor
(:mod:`.inplace_kernels`), verification of every trace of a compilation (:mod:`.trace_verification`) and the
collective-order certificate (:mod:`.certificate`).
"""
