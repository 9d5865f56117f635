"""Print the effects of a few real PyTorch ops and where each answer comes from.

Run: ``python examples/effects_demo.py``. Shows schema-derived defaults (``Tensor(a!)`` writes, blind writes,
views, the RNG resource), a ``torch.library.custom_op(mutates_args=...)`` op, an explicit declaration that fixes a
schema which under-reports its writes (``native_batch_norm``), and the opaque fallback for an op nobody described.
"""

from __future__ import annotations

import torch

import effects

aten = torch.ops.aten


@torch.library.custom_op("effects_demo::scale_into", mutates_args=("dst",))
def scale_into(src: torch.Tensor, dst: torch.Tensor, factor: float) -> None:
    """Write ``src * factor`` into ``dst``."""
    dst.copy_(src * factor)


def main() -> None:
    registry = effects.Registry()  # isolated: the demo's declaration does not touch default_registry()
    # PyTorch's schema for native_batch_norm omits the (a!) on running_mean/running_var, which training mode
    # updates in place; declare the truth explicitly.
    bn_signature = effects.derive(aten.native_batch_norm.default)[1]
    bn_effects = effects.make_effects(
        reads=["input", "weight", "bias"], read_writes=["running_mean", "running_var"],
        signature=bn_signature, op="aten::native_batch_norm",
    )
    ops = [
        ("aten.add_.Tensor", aten.add_.Tensor),
        ("aten.copy_", aten.copy_.default),
        ("aten.index_copy_", aten.index_copy_.default),
        ("aten.bernoulli_", aten.bernoulli_.float),
        ("aten.add.out", aten.add.out),
        ("aten.reshape", aten.reshape.default),
        ("custom_op scale_into", scale_into),
        ("aten.native_batch_norm", aten.native_batch_norm.default),
        ("my_lib::mystery", "my_lib::mystery"),
    ]
    with registry.declare(aten.native_batch_norm.default, bn_effects, source="effects_demo"):
        rows = [("op", "origin", "effects")]
        for label, op in ops:
            resolution = registry.resolve(op)
            rows.append((label, f"{resolution.origin} ({resolution.source})", str(resolution.effects)))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    rows.insert(1, tuple("-" * w for w in widths) + ("-" * len("effects"),))
    for label, origin, described in rows:
        print(f"{label:<{widths[0]}}  {origin:<{widths[1]}}  {described}")


if __name__ == "__main__":
    main()
