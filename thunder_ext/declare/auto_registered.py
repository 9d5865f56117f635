"""Thunder's contract for the torch functions it registers automatically (``OpTags.AUTO_REGISTERED``: the torch
fallback runs them) that have no ATen schema to derive effects from — Python functions such as
``F.multi_head_attention_forward``: Thunder refuses to auto-register in-place (``X_``) names and lists the ones that
return views (declared as views by :mod:`thunder_ext.declare.declarations`), so the rest are out-of-place. Writing
to such a function's result (``out, _ = mha(x, x, x); out.add_(x)``) then functionalizes instead of meeting an
opaque op."""

from __future__ import annotations

import inspect

import torch
from collections.abc import Hashable

from effects import PURE, Effects, make_effects

from thunder.core.prims import OpTags
from thunder.core.symbol import Symbol

__all__ = ["contract", "torch_function_named"]


def contract(sid: Hashable, sym: Symbol, torch_fns: list[object]) -> Effects | None:
    """Thunder's contract for the torch functions it registers automatically (``OpTags.AUTO_REGISTERED``: the torch
    fallback runs them) that have no schema to derive from (Python functions such as
    ``F.multi_head_attention_forward``): they are out-of-place (Thunder refuses to auto-register ``X_`` names) and
    return views only where Thunder lists them (declared as views above). A ``Tensor`` method's result may still
    be ``self`` (``cdouble`` of a complex tensor, the named-tensor views); a function with an ``inplace`` argument
    writes whenever the call says so: it stays opaque."""
    if not sym.tags or OpTags.AUTO_REGISTERED not in sym.tags or any(_takes_inplace(fn) for fn in torch_fns):
        return None
    return make_effects(aliases=[(0, 0, True)]) if str(sid).startswith("Tensor.") else PURE


def _takes_inplace(fn: object) -> bool:
    try:
        return "inplace" in inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def torch_function_named(dotted: object) -> object | None:
    """``"torch.nn.functional.fold"`` -> the function (auto-registered symbols are named after it)."""
    if not isinstance(dotted, str) or not dotted.startswith("torch."):
        return None
    obj: object = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj
