"""The torch op vocabulary of generated programs: for each op, how to pick shape-correct operands, how to run it,
and how to print it as Python.

Design:

* An :class:`OpSpec` is one op. Its ``key`` is what :class:`~effects.program.Instruction.op` holds; for aten ops it
  is the ``OpOverload`` itself, so the registry derives the effects from the schema (``Tensor(a!)`` etc.) — the
  fuzzer tests the real declarations, not a copy of them. Generator-bound RNG ops carry per-instruction effects
  naming their generator (``rng[g0]``), and :func:`opaque_axpy_` is a plain function no registry knows, so it is
  opaque (a full barrier).
* Generation is *interpretation of integers*: :meth:`OpSpec.build` gets the values defined so far (an :class:`Env`
  of :class:`TensorMeta`) and a few drawn integers (:class:`Picks`), and returns operands that fit, or ``None``.
  Every integer is used modulo the number of choices, so any list of integers is a valid program and Hypothesis
  can shrink freely; 0 means "the most recent candidate / the first option".
* **Collectives** are neutral fakes of ``torch.distributed`` ops on named process groups (``c0``, ``c1``): a
  :class:`Channel` per group stands for what the other ranks contribute, in the order that group's collectives run
  (each collective adds the group's next draw), so moving a collective across another of *its* group, dropping or
  duplicating one changes the values and the group's log, while collectives of different groups commute. They order
  on ``comm[c0]``/``comm[c1]`` (per-instruction effects, like generator-bound RNG).
* Ops are listed pure first, then views, in-place, RNG, collectives and opaque: shrinking the op index simplifies
  toward pure.
* Safety rules keep every program executable: in-place ops write only writable values (never an ``expand`` view
  or anything viewed from one) and never read another operand sharing the written storage; ``view`` only applies
  to values known to be contiguous. Storage ids are conservative (``reshape`` may alias, so it shares).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..model import Access, Alias, Effects, OperandEffect, Resource, ResourceEffect, comm
from ..program import Const
from ..schema import derive

__all__ = [
    "OpKind", "TensorMeta", "Env", "Picks", "Built", "OpSpec", "Indices", "GeneratorRef", "GroupRef", "Channel",
    "VOCABULARY", "opaque_axpy_", "fake_all_reduce_", "fake_broadcast", "spec_for", "format_operand", "aten_caller",
]

aten = torch.ops.aten


class OpKind(enum.IntEnum):
    """Op categories, in shrink order (lower is simpler)."""

    PURE = 0
    VIEW = 1
    INPLACE = 2
    RNG = 3
    COLLECTIVE = 4
    OPAQUE = 5


@dataclass(frozen=True, slots=True)
class Indices:
    """A literal index tensor operand (``torch.tensor(values)``), kept hashable inside a :class:`Const`."""

    values: tuple[int, ...]

    def tensor(self) -> torch.Tensor:
        return torch.tensor(self.values, dtype=torch.long)

    def __repr__(self) -> str:
        return f"torch.tensor({list(self.values)!r})"


@dataclass(frozen=True, slots=True)
class GeneratorRef:
    """A ``torch.Generator`` operand, by name; the runner binds it to the run's generator object."""

    name: str

    @property
    def resource(self) -> Resource:
        return Resource("rng", self.name)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A process group operand of a fake collective, by name; the runner binds it to the run's :class:`Channel`."""

    name: str

    @property
    def resource(self) -> Resource:
        return comm(self.name)

    def __repr__(self) -> str:
        return self.name


class Channel:
    """One process group as seen by a rank: ``generator`` draws what the other ranks contribute, in the order the
    group's collectives run, and ``log`` records the shape each collective reduced (the group's sequence)."""

    __slots__ = ("generator", "log")

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.log: list[tuple[int, ...]] = []

    def contribution(self, like: torch.Tensor) -> torch.Tensor:
        self.log.append(tuple(like.shape))
        return torch.rand(like.shape, generator=self.generator)


def fake_all_reduce_(x: torch.Tensor, group: Channel) -> torch.Tensor:
    """``torch.distributed.all_reduce(x, group=group)`` on one rank: ``x`` plus the other ranks' contribution, in
    place."""
    return x.add_(group.contribution(x))


def fake_broadcast(x: torch.Tensor, group: Channel) -> torch.Tensor:
    """A collective that reads ``x`` and returns fresh storage (``all_gather``, ``broadcast``)."""
    return x + group.contribution(x)


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """What generation knows about a value: enough to pick operands that fit and to keep writes legal."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    storage: int = 0
    """Values with different ids never share memory (same id: they may)."""
    writable: bool = True
    """False for expand views (internal overlap) and views of them."""
    contiguous: bool = True
    """True only when known to be contiguous (``view`` needs it)."""

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def is_float(self) -> bool:
        return self.dtype == "float32"


class Picks:
    """Drawn integers consumed in turn; each is reduced modulo the number of options."""

    __slots__ = ("_values", "_next")

    def __init__(self, values: Sequence[int]) -> None:
        self._values = tuple(values) or (0,)
        self._next = 0

    def below(self, n: int) -> int:
        value = self._values[self._next % len(self._values)] + self._next // len(self._values)
        self._next += 1
        return value % n

    def choose(self, options: Sequence[Any]) -> Any:
        return options[self.below(len(options))] if options else None


class Env:
    """The values defined so far while generating a program (definition order), the generator names and the
    process group names."""

    __slots__ = ("values", "generators", "groups", "_storages")

    def __init__(self, values: Sequence[tuple[str, TensorMeta]], generators: Sequence[str],
                 groups: Sequence[str] = ()) -> None:
        self.values: list[tuple[str, TensorMeta]] = list(values)
        self.generators = tuple(generators)
        self.groups = tuple(groups)
        self._storages = itertools.count(1 + max((m.storage for _, m in self.values), default=0))

    def pick(self, picks: Picks, accept: Callable[[TensorMeta], bool]) -> tuple[str, TensorMeta] | None:
        """A defined value satisfying ``accept``; pick 0 is the most recent one."""
        found: tuple[str, TensorMeta] | None = picks.choose([v for v in reversed(self.values) if accept(v[1])])
        return found

    def fresh(self, shape: tuple[int, ...], dtype: str = "float32", *, like: Sequence[TensorMeta] = ()) -> TensorMeta:
        """Metadata of a newly allocated result computed from ``like``: torch gives an elementwise result the
        layout of its inputs, so it is known contiguous only if they all are and none is broadcast."""
        contiguous = all(m.contiguous and m.shape == tuple(shape) for m in like)
        return TensorMeta(tuple(shape), dtype, next(self._storages), contiguous=contiguous)


@dataclass(frozen=True, slots=True)
class Built:
    """Operands chosen for one instruction and the metadata of its output (``None``: it has no output)."""

    operands: tuple[Any, ...]
    out: TensorMeta | None


Builder = Callable[[Env, Picks], "Built | None"]


@dataclass(frozen=True, slots=True, repr=False)
class OpSpec:
    """One op of the vocabulary."""

    name: str
    key: Hashable
    kind: OpKind
    build: Builder
    run: Callable[..., Any]
    """Called with the resolved operands in signature order."""
    python: Callable[[Sequence[str]], str]
    """Readable Python for a call, given the operands already formatted."""

    def effects_for(self, operands: Sequence[Any]) -> Effects | None:
        """Per-instruction effects: generator-bound RNG ops order on their own generator, not ``rng[default]``;
        collectives on their group's ``comm`` resource."""
        groups = [op.value for op in operands if isinstance(op, Const) and isinstance(op.value, GroupRef)]
        if groups:
            written = self.kind is OpKind.COLLECTIVE and self.name.endswith("_")
            return Effects((OperandEffect(0, Access.READ_WRITE),) if written else (),
                           frozenset({Alias(0, 0)}) if written else frozenset(),
                           frozenset(ResourceEffect(g.resource) for g in groups))
        gens = [op.value for op in operands if isinstance(op, Const) and isinstance(op.value, GeneratorRef)]
        if not gens:
            return None
        derived = derive(self.key)
        base = derived[0] if derived is not None else Effects()
        return Effects(base.operands, base.aliases, frozenset(ResourceEffect(g.resource) for g in gens),
                       uncapturable=base.uncapturable)

    def __repr__(self) -> str:
        return f"<OpSpec {self.name}>"


def format_operand(operand: Any, names: Callable[[Hashable], str] = str) -> str:
    """Python source for one operand (a value, a literal, or a list operand)."""
    if isinstance(operand, Const):
        return repr(operand.value)
    if isinstance(operand, tuple):
        return "(" + "".join(format_operand(o, names) + ", " for o in operand).rstrip(" ") + ")"
    return names(operand)


def aten_caller(overload: Any) -> Callable[..., Any]:
    """Call an aten overload with operands in signature order (keyword-only ones passed by name)."""
    kwonly = tuple(arg.name if arg.kwarg_only else None for arg in overload._schema.arguments)

    def call(*operands: Any) -> Any:
        args = [o for o, k in zip(operands, kwonly, strict=False) if k is None]
        kwargs = {k: o for o, k in zip(operands, kwonly, strict=False) if k is not None}
        return overload(*args, **kwargs)

    return call


def _template(text: str) -> Callable[[Sequence[str]], str]:
    return lambda args: text.format(*args)


# --- shape helpers -----------------------------------------------------------------------------------------
def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast shape of ``a`` and ``b``, or ``None`` if they do not broadcast."""
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


def _fits_into(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    return broadcast(src, dst) == dst


def _float(m: TensorMeta) -> bool:
    return m.is_float


def _target(m: TensorMeta) -> bool:
    return m.is_float and m.writable


def _reshapes(numel: int) -> list[tuple[int, ...]]:
    return [(numel,)] + [(d, numel // d) for d in range(1, numel + 1) if numel % d == 0]


def _view_meta(x: TensorMeta, shape: tuple[int, ...], contiguous: bool) -> TensorMeta:
    return replace(x, shape=tuple(shape), contiguous=contiguous)


# --- builders: pure ------------------------------------------------------------------------------------------
def _unary(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _float)
    return x and Built((x[0],), env.fresh(x[1].shape, like=[x[1]]))


def _binary(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _float)
    if not x:
        return None
    y = env.pick(p, lambda m: m.is_float and broadcast(m.shape, x[1].shape) is not None)
    shape = broadcast(x[1].shape, y[1].shape) if y else None
    return Built((x[0], y[0]), env.fresh(shape, like=[x[1], y[1]])) if y and shape is not None else None


def _gt(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _float)
    return x and Built((x[0], Const(p.choose((0.0, 0.5, -0.5)))), env.fresh(x[1].shape, "bool", like=[x[1]]))


def _where(env: Env, p: Picks) -> Built | None:
    c = env.pick(p, lambda m: m.dtype == "bool")
    if not c:
        return None
    x = env.pick(p, lambda m: m.is_float and broadcast(m.shape, c[1].shape) is not None)
    cx = broadcast(c[1].shape, x[1].shape) if x else None
    if not x or cx is None:
        return None
    y = env.pick(p, lambda m: m.is_float and broadcast(m.shape, cx) is not None)
    shape = broadcast(cx, y[1].shape) if y else None
    return Built((c[0], x[0], y[0]), env.fresh(shape, like=[c[1], x[1], y[1]])) if y and shape is not None else None


def _sum(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.is_float and m.ndim >= 1)
    if not x:
        return None
    dim, keepdim = p.below(x[1].ndim), bool(p.below(2))
    shape = list(x[1].shape)
    shape[dim:dim + 1] = [1] if keepdim else []
    out = replace(env.fresh(tuple(shape)), contiguous=x[1].contiguous)  # a reduction keeps the input's layout
    return Built((x[0], Const((dim,)), Const(keepdim)), out)


def _matmul(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.is_float and m.ndim == 2)
    if not x:
        return None
    y = env.pick(p, lambda m: m.is_float and m.ndim in (1, 2) and m.shape[0] == x[1].shape[1])
    return y and Built((x[0], y[0]), env.fresh(x[1].shape[:1] + y[1].shape[1:]))


def _clone(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: True)
    return x and Built((x[0],), env.fresh(x[1].shape, x[1].dtype, like=[x[1]]))  # clone keeps dense layouts


# --- builders: views ------------------------------------------------------------------------------------------
def _view(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.contiguous)
    if not x:
        return None
    shape = p.choose(_reshapes(x[1].numel))
    return Built((x[0], Const(shape)), _view_meta(x[1], shape, True))


def _reshape(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: True)
    if not x:
        return None
    shape = p.choose(_reshapes(x[1].numel))
    return Built((x[0], Const(shape)), _view_meta(x[1], shape, x[1].contiguous))  # a view if it can be


def _t(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.ndim <= 2)
    return x and Built((x[0],), _view_meta(x[1], x[1].shape[::-1], x[1].contiguous and x[1].ndim < 2))


def _slice(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.ndim >= 1)
    if not x:
        return None
    dim = p.below(x[1].ndim)
    size = x[1].shape[dim]
    start = p.below(size)
    end = start + 1 + p.below(size - start)
    shape = x[1].shape[:dim] + (end - start,) + x[1].shape[dim + 1:]
    meta = _view_meta(x[1], shape, x[1].contiguous and dim == 0)
    return Built((x[0], Const(dim), Const(start), Const(end)), meta)


def _select(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.ndim >= 1)
    if not x:
        return None
    dim = p.below(x[1].ndim)
    index = p.below(x[1].shape[dim])
    meta = _view_meta(x[1], x[1].shape[:dim] + x[1].shape[dim + 1:], x[1].contiguous and dim == 0)
    return Built((x[0], Const(dim), Const(index)), meta)


def _expand(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.ndim <= 2)
    if not x:
        return None
    shape = tuple(3 if s == 1 and p.below(2) else s for s in x[1].shape)
    if p.below(2) or shape == x[1].shape:
        shape = (2, *shape)
    return Built((x[0], Const(shape)), replace(x[1], shape=shape, writable=False, contiguous=False))


def _unsqueeze(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: m.ndim <= 2)
    if not x:
        return None
    dim = p.below(x[1].ndim + 1)
    shape = x[1].shape[:dim] + (1,) + x[1].shape[dim:]
    return Built((x[0], Const(dim)), _view_meta(x[1], shape, x[1].contiguous))


# --- builders: in-place ---------------------------------------------------------------------------------------
def _source_for(env: Env, p: Picks, x: TensorMeta) -> tuple[str, TensorMeta] | None:
    """A float operand broadcastable into ``x`` that does not share its storage."""
    return env.pick(p, lambda m: m.is_float and m.storage != x.storage and _fits_into(m.shape, x.shape))


def _inplace_binary(*extra: Callable[[Picks], Any]) -> Builder:
    def build(env: Env, p: Picks) -> Built | None:
        x = env.pick(p, _target)
        y = x and _source_for(env, p, x[1])
        return Built((x[0], y[0], *(Const(e(p)) for e in extra)), x[1]) if x and y else None

    return build


def _zero(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _target)
    return x and Built((x[0],), x[1])


def _clamp(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _target)
    low = p.choose((-0.5, -1.0, 0.0))
    return x and Built((x[0], Const(low), Const(low + p.choose((0.5, 1.0)))), x[1])


def _masked_fill(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _target)
    if not x:
        return None
    mask = env.pick(p, lambda m: m.dtype == "bool" and _fits_into(m.shape, x[1].shape))
    return mask and Built((x[0], mask[0], Const(p.choose((0.0, 2.0, -1.5)))), x[1])


def _index_copy(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: _target(m) and m.ndim >= 1)
    if not x:
        return None
    meta, dim = x[1], p.below(x[1].ndim)

    def fits(m: TensorMeta) -> bool:
        return (m.is_float and m.storage != meta.storage and m.ndim == meta.ndim
                and 1 <= m.shape[dim] <= meta.shape[dim]
                and all(a == b for d, (a, b) in enumerate(zip(m.shape, meta.shape, strict=True)) if d != dim))

    src = env.pick(p, fits)
    if not src:
        return None
    pool = list(range(meta.shape[dim]))
    index = Indices(tuple(pool.pop(p.below(len(pool))) for _ in range(src[1].shape[dim])))  # distinct
    return Built((x[0], Const(dim), Const(index), src[0]), meta)


def _index_put(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, lambda m: _target(m) and m.ndim >= 1)
    if not x:
        return None
    meta = x[1]
    count = 1 + p.below(4)
    shape = (count, *meta.shape[1:])
    values = env.pick(p, lambda m: m.is_float and m.storage != meta.storage and _fits_into(m.shape, shape))
    if not values:
        return None
    index = Indices(tuple(p.below(meta.shape[0]) for _ in range(count)))  # duplicates accumulate
    return Built((x[0], (Const(index),), values[0], Const(True)), meta)


# --- builders: RNG and opaque ---------------------------------------------------------------------------------
def _uniform(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _target)
    gen = p.choose(env.generators)
    return x and gen and Built((x[0], Const(-1.0), Const(1.0), Const(GeneratorRef(gen))), x[1])


def _normal(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _float)
    gen = p.choose(env.generators)
    return x and gen and Built((x[0], Const(0.5), Const(GeneratorRef(gen))), env.fresh(x[1].shape, like=[x[1]]))


def opaque_axpy_(y: torch.Tensor, x: torch.Tensor) -> None:
    """``y += x / 2`` in place, hidden from every registry: an op with unknown (opaque) effects."""
    y.add_(x, alpha=0.5)


def _opaque(env: Env, p: Picks) -> Built | None:
    y = env.pick(p, _target)
    x = y and _source_for(env, p, y[1])
    return Built((y[0], x[0]), None) if y and x else None


def _collective(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _target)
    group = p.choose(env.groups)
    return x and group and Built((x[0], Const(GroupRef(group))), x[1])


def _collective_fresh(env: Env, p: Picks) -> Built | None:
    x = env.pick(p, _float)
    group = p.choose(env.groups)
    return x and group and Built((x[0], Const(GroupRef(group))), env.fresh(x[1].shape, like=[x[1]]))


def _slice_python(args: Sequence[str]) -> str:
    x, dim, start, end = args
    return f"{x}[{':, ' * int(dim)}{start}:{end}]"


def _aten(name: str, key: Any, kind: OpKind, build: Builder, python: str | Callable[[Sequence[str]], str]) -> OpSpec:
    fmt = _template(python) if isinstance(python, str) else python
    return OpSpec(name, key, kind, build, aten_caller(key), fmt)


P, V, I, R = OpKind.PURE, OpKind.VIEW, OpKind.INPLACE, OpKind.RNG  # noqa: E741 - the table's one-letter kinds
VOCABULARY: tuple[OpSpec, ...] = (
    _aten("add", aten.add.Tensor, P, _binary, "torch.add({0}, {1})"),
    _aten("mul", aten.mul.Tensor, P, _binary, "torch.mul({0}, {1})"),
    _aten("sin", aten.sin.default, P, _unary, "torch.sin({0})"),
    _aten("exp", aten.exp.default, P, _unary, "torch.exp({0})"),
    _aten("gt", aten.gt.Scalar, P, _gt, "torch.gt({0}, {1})"),
    _aten("where", aten.where.self, P, _where, "torch.where({0}, {1}, {2})"),
    _aten("sum", aten.sum.dim_IntList, P, _sum, "torch.sum({0}, {1}, keepdim={2})"),
    _aten("matmul", aten.matmul.default, P, _matmul, "torch.matmul({0}, {1})"),
    _aten("clone", aten.clone.default, P, _clone, "torch.clone({0})"),
    _aten("view", aten.view.default, V, _view, "{0}.view({1})"),
    _aten("reshape", aten.reshape.default, V, _reshape, "{0}.reshape({1})"),
    _aten("t", aten.t.default, V, _t, "{0}.t()"),
    _aten("slice", aten.slice.Tensor, V, _slice, _slice_python),
    _aten("select", aten.select.int, V, _select, "{0}.select({1}, {2})"),
    _aten("expand", aten.expand.default, V, _expand, "{0}.expand({1})"),
    _aten("unsqueeze", aten.unsqueeze.default, V, _unsqueeze, "{0}.unsqueeze({1})"),
    _aten("add_", aten.add_.Tensor, I, _inplace_binary(lambda p: p.choose((1.0, 2.0, -1.0))),
          "{0}.add_({1}, alpha={2})"),
    _aten("mul_", aten.mul_.Tensor, I, _inplace_binary(), "{0}.mul_({1})"),
    _aten("copy_", aten.copy_.default, I, _inplace_binary(), "{0}.copy_({1})"),
    _aten("index_copy_", aten.index_copy_.default, I, _index_copy, "{0}.index_copy_({1}, {2}, {3})"),
    _aten("index_put_", aten.index_put_.default, I, _index_put, "{0}.index_put_({1}, {2}, accumulate={3})"),
    _aten("masked_fill_", aten.masked_fill_.Scalar, I, _masked_fill, "{0}.masked_fill_({1}, {2})"),
    _aten("zero_", aten.zero_.default, I, _zero, "{0}.zero_()"),
    _aten("clamp_", aten.clamp_.default, I, _clamp, "{0}.clamp_({1}, {2})"),
    _aten("uniform_", aten.uniform_.default, R, _uniform, "{0}.uniform_({1}, {2}, generator={3})"),
    _aten("normal", aten.normal.Tensor_float, R, _normal, "torch.normal({0}, {1}, generator={2})"),
    OpSpec("fake_broadcast", fake_broadcast, OpKind.COLLECTIVE, _collective_fresh, fake_broadcast,
           _template("fake_broadcast({0}, {1})")),
    OpSpec("fake_all_reduce_", fake_all_reduce_, OpKind.COLLECTIVE, _collective, fake_all_reduce_,
           _template("fake_all_reduce_({0}, {1})")),
    OpSpec("opaque_axpy_", opaque_axpy_, OpKind.OPAQUE, _opaque, opaque_axpy_, _template("opaque_axpy_({0}, {1})")),
)
"""Every op the generator uses, in shrink order (see :class:`OpKind`)."""

_BY_KEY: dict[Hashable, OpSpec] = {spec.key: spec for spec in VOCABULARY}


def spec_for(key: Hashable) -> OpSpec | None:
    """The vocabulary entry whose op key is ``key`` (``None`` if the vocabulary does not know it)."""
    return _BY_KEY.get(key)
