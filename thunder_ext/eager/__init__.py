"""Eager semantics: compiled programs raise, round and differentiate as eager PyTorch does, and the libraries
users train with trace.

Eager's errors (:mod:`.eager_checks`), calls Thunder's symbols refuse (:mod:`.overloads`), gradient rules Thunder
gets wrong (:mod:`.grad_fixes`), seeding (:mod:`.seeding`), and what ``torch.optim``, ``BatchNorm``, the profiler
and Hugging Face ``transformers`` need (:mod:`.optimizers`, :mod:`.batch_norm`, :mod:`.profiler`,
:mod:`.transformers_compat`).
"""
