"""Keep declarations honest: run an op on sample inputs and compare what it *did* with what it *declared*.

A declaration is a promise the dependency graph relies on; a kernel that writes an operand it did not declare
(or declares a write it never does) is reordered or deleted wrongly, silently. :func:`check_op` runs ``fn`` on
fresh clones of each sample and reports, as :class:`Finding` values of a :class:`Lie` kind:

* **undeclared writes** — an operand's version counter moved, or its storage bytes changed (the content check
  also catches kernels that write through raw pointers and never bump the counter, and writes outside the
  operand's view). Writes are judged per *storage*, as the graph does: a write is declared if some operand that
  shares the storage in this sample is declared written;
* **declared writes that never happen** in any sample (a wrong position is the usual cause);
* **pure writes that read the old value**: an operand declared as a blind write (``WRITE``, like a ``copy_``
  destination) is perturbed and the op re-run; if any output or operand changes, the old contents mattered
  (a partial write keeps untouched elements), so it must be read-write;
* **undeclared output aliasing** (an output shares storage with an input without an :class:`~effects.Alias`)
  and definite aliases that never happen;
* **undeclared RNG use**: the default CPU generator (and CUDA generators, once CUDA is initialised) or an
  explicit ``torch.Generator`` operand advanced without an ``rng`` resource declared.

Samples are cloned so that inputs sharing storage in the sample still share it in the clone (``f(x, x.t())``
stays aliased); the caller's tensors and the global RNG state are left untouched. :func:`checked_call` is the
single-call variant used by debug modes: it runs on the real arguments and reports only undeclared behaviour
(one call may legitimately not write). Bitwise comparison makes nondeterministic kernels (atomics) look like
readers in the blind-write probe; give such ops ``READ_WRITE`` or deterministic samples.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .errors import EffectCheckError, UnknownOperandError
from .model import Access, Alias, Effects, OperandEffect, Resource, ResourceEffect, Signature, rng

__all__ = ["Sample", "Lie", "Finding", "CheckReport", "check_op", "checked_call"]


@dataclass(frozen=True, slots=True)
class Sample:
    """Arguments for one call: ``fn(*args, **kwargs)``. A plain tuple is accepted wherever a Sample is."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


class Lie(enum.Enum):
    """The ways runtime behaviour can contradict a declaration."""

    UNDECLARED_WRITE = "undeclared write"
    MISSING_WRITE = "declared write never happens"
    BLIND_WRITE_READS = "declared pure write depends on the old value"
    UNDECLARED_ALIAS = "undeclared output alias"
    MISSING_ALIAS = "declared alias never happens"
    UNDECLARED_RNG = "undeclared RNG use"


@dataclass(frozen=True, slots=True)
class Finding:
    """One contradiction. ``operand``/``output`` are positions; ``sample`` is the sample index (None: all)."""

    kind: Lie
    evidence: str
    operand: int | None = None
    name: str | None = None
    output: int | None = None
    sample: int | None = None

    def __str__(self) -> str:
        where = [] if self.operand is None else [f"operand {self.operand}" + (f" ({self.name!r})" if self.name else "")]
        where += [] if self.output is None else [f"output {self.output}"]
        where += [] if self.sample is None else [f"sample {self.sample}"]
        return f"{self.kind.value}: {', '.join(where) + ': ' if where else ''}{self.evidence}"


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Outcome of checking ``op``: its declared effects, what was observed, and the contradictions."""

    op: str
    declared: Effects
    observed: Effects
    """What the op was seen to do (writes, aliases, RNG): a starting point for a correct declaration."""
    findings: tuple[Finding, ...]
    samples: int

    @property
    def ok(self) -> bool:
        return not self.findings

    def raise_if_failed(self) -> CheckReport:
        """Return self, or raise :class:`~effects.EffectCheckError` listing every finding."""
        if self.findings:
            raise EffectCheckError(str(self))
        return self

    def __str__(self) -> str:
        head = f"{self.op}: {len(self.findings) or 'no'} contradiction(s) in {self.samples} sample(s)"
        lines = [head, f"  declared: {self.declared}", f"  observed: {self.observed}"]
        lines += [f"  - {f}" for f in self.findings]
        if self.findings:
            lines.append("Fix the declaration to cover what the op does (start from 'observed'), or fix the op.")
        return "\n".join(lines)


# --- operands --------------------------------------------------------------------------------------------------
def _as_sample(sample: Sample | tuple[Any, ...] | list[Any]) -> Sample:
    return sample if isinstance(sample, Sample) else Sample(tuple(sample))


def _names(fn: Callable[..., Any], signature: Signature | None) -> list[str]:
    if signature is not None:
        return [p.name for p in signature.params]
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins and C++ ops may have no Python signature
        return []
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _operands(sample: Sample, names: list[str], op: str) -> dict[int, Any]:
    """Sample arguments by operand position (keyword arguments placed by name)."""
    operands = dict(enumerate(sample.args))
    for key, value in sample.kwargs.items():
        if key not in names:
            raise UnknownOperandError(
                f"{op}: sample keyword argument {key!r} is not a known operand (operands: {names or 'unknown'}); "
                "pass it positionally or give signature=..."
            )
        operands[names.index(key)] = value
    return operands


def _tensors(value: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(v for v in value if isinstance(v, torch.Tensor))
    return ()


def _storage_key(t: torch.Tensor) -> tuple[str, int] | None:
    if t.layout is not torch.strided or t.untyped_storage().nbytes() == 0:
        return None
    return str(t.device), t.untyped_storage().data_ptr()


# --- cloning (aliasing-preserving) -----------------------------------------------------------------------------
def _clone_sample(sample: Sample) -> Sample:
    storages: dict[tuple[str, int], torch.UntypedStorage] = {}

    def clone(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            key = _storage_key(value)
            if key is None:
                return value.clone()
            storage = storages.setdefault(key, value.untyped_storage().clone())
            new = torch.empty(0, dtype=value.dtype, device=value.device)
            new.set_(storage, value.storage_offset(), value.size(), value.stride())
            return new.requires_grad_(value.requires_grad) if value.is_leaf else new
        if isinstance(value, torch.Generator):
            twin = torch.Generator(device=value.device)
            twin.set_state(value.get_state())
            return twin
        if isinstance(value, (list, tuple)):
            return type(value)(clone(v) for v in value)
        return value

    return Sample(tuple(clone(a) for a in sample.args), {k: clone(v) for k, v in sample.kwargs.items()})


# --- observing one call ----------------------------------------------------------------------------------------
def _generators(operands: Mapping[int, Any]) -> dict[str, torch.Generator]:
    gens = {"cpu": torch.default_generator}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gens.update({f"cuda:{i}": g for i, g in enumerate(torch.cuda.default_generators)})
    gens.update({f"generator operand {i}": g for i, g in operands.items() if isinstance(g, torch.Generator)})
    return gens


def _byte_view(storage_bytes: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as bytes, read from a uint8 tensor over (a snapshot of) its storage."""
    size = t.element_size()
    return storage_bytes.as_strided((*t.shape, size), (*(s * size for s in t.stride()), 1), t.storage_offset() * size)


def _storage_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


@dataclass(frozen=True, slots=True)
class _Observation:
    result: Any
    writes: dict[int, str]
    """operand position -> evidence of a write"""
    groups: dict[int, frozenset[int]]
    """operand position -> positions sharing storage with it in this sample (itself included)"""
    aliases: dict[Alias, str]
    rng: dict[str, str]
    """generator name -> evidence"""


def _write_evidence(
    t: torch.Tensor, before: tuple[Any, ...], snapshots: Mapping[Any, torch.UntypedStorage]
) -> str | None:
    """How ``t`` was written during the call (None: it was not)."""
    key, version, shape, stride, offset = before
    if (_storage_key(t), t.shape, t.stride(), t.storage_offset()) != (key, shape, stride, offset):
        return f"metadata or storage replaced (shape {tuple(shape)} -> {tuple(t.shape)})"
    if key is None:
        return None  # nothing stored (empty or non-strided): only metadata could change
    old, new = _storage_bytes(snapshots[key]), _storage_bytes(t.untyped_storage())
    changed = int((_byte_view(old, t) != _byte_view(new, t)).reshape(*t.shape, -1).any(-1).sum())
    if changed:
        return f"{changed} of {t.numel()} element(s) changed"
    if t._version != version:
        return f"version counter {version} -> {t._version} (contents unchanged)"
    if not torch.equal(old, new):
        return "storage bytes outside the operand's view changed"
    return None


def _observe(fn: Callable[..., Any], sample: Sample, operands: Mapping[int, Any]) -> _Observation:
    tensors = {i: _tensors(v) for i, v in operands.items() if _tensors(v)}
    keys = {i: {k for t in ts if (k := _storage_key(t)) is not None} for i, ts in tensors.items()}
    snapshots = {k: t.untyped_storage().clone() for ts in tensors.values() for t in ts
                 if (k := _storage_key(t)) is not None}
    before = {i: [(_storage_key(t), t._version, t.shape, t.stride(), t.storage_offset()) for t in ts]
              for i, ts in tensors.items()}
    generators = _generators(operands)
    states = {name: g.get_state() for name, g in generators.items()}

    result = fn(*sample.args, **sample.kwargs)

    writes: dict[int, str] = {}
    for i, ts in tensors.items():
        for t, state in zip(ts, before[i], strict=True):
            if (evidence := _write_evidence(t, state, snapshots)) is not None:
                writes[i] = evidence
                break
    groups = {i: frozenset(j for j in keys if keys[i] & keys[j]) for i in keys}
    aliases = {}
    for j, out in enumerate(result if isinstance(result, tuple) else (result,)):
        out_keys = {k for t in _tensors(out) if (k := _storage_key(t)) is not None}
        for i in keys:
            if out_keys & keys[i]:
                aliases[Alias(j, i)] = f"output {j} shares storage with operand {i}"
    advanced = {name: "generator state advanced" for name, g in generators.items()
                if not torch.equal(states[name], g.get_state())}
    return _Observation(result, writes, groups, aliases, advanced)


# --- judging ---------------------------------------------------------------------------------------------------
def _rng_declared(effects: Effects, generator: str) -> bool:
    keys = {r.resource.key for r in effects.resources if r.resource.kind == "rng"}
    if generator.startswith("generator operand"):
        return bool(keys)
    return bool(keys & {"default", generator, generator.split(":")[0]})


def _undeclared(effects: Effects, obs: _Observation, names: list[str], sample: int | None) -> list[Finding]:
    if effects.opaque:
        return []
    findings = [
        Finding(Lie.UNDECLARED_WRITE, evidence, i, _name(names, i), sample=sample)
        for i, evidence in sorted(obs.writes.items())
        if not obs.groups.get(i, frozenset({i})) & effects.written
    ]
    declared_aliases = {(a.output, a.operand) for a in effects.aliases}
    findings += [
        Finding(Lie.UNDECLARED_ALIAS, evidence, alias.operand, _name(names, alias.operand), alias.output, sample)
        for alias, evidence in sorted(obs.aliases.items())
        if not any((alias.output, j) in declared_aliases for j in obs.groups.get(alias.operand, {alias.operand}))
    ]
    findings += [
        Finding(Lie.UNDECLARED_RNG, f"{gen}: {evidence}; declare an ordered rng resource", sample=sample)
        for gen, evidence in sorted(obs.rng.items())
        if not _rng_declared(effects, gen)
    ]
    return findings


def _bits(value: Any) -> list[Any]:
    """Leaves of ``value`` in comparable form: tensors as raw bytes (NaN-safe), generators as their state."""
    leaves = []
    for leaf in tree_leaves(value):
        if isinstance(leaf, torch.Generator):
            leaf = leaf.get_state()
        if isinstance(leaf, torch.Tensor):
            leaf = leaf.detach().contiguous().reshape(-1).view(torch.uint8)
        leaves.append(leaf)
    return leaves


def _same(a: Any, b: Any) -> bool:
    left, right = _bits(a), _bits(b)
    return len(left) == len(right) and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y
        for x, y in zip(left, right, strict=True)
    )


def _perturb(t: torch.Tensor) -> None:
    with torch.no_grad():
        if t.dtype is torch.bool:
            t.logical_not_()
        elif t.is_floating_point() or t.is_complex():
            t.mul_(-2).add_(1)  # no finite fixed point representable exactly (x = 1/3)
        else:
            t.add_(1)


def _reads_blind_write(
    fn: Callable[..., Any], sample: Sample, names: list[str], op: str, position: int, reference: Sample,
    expected: Any, rng_state: torch.Tensor,
) -> bool:
    """Re-run with operand ``position`` perturbed; True when outputs or final operands differ from the first run."""
    probe = _clone_sample(sample)
    operands = _operands(probe, names, op)
    for t in _tensors(operands[position]):
        _perturb(t)
    torch.default_generator.set_state(rng_state)
    result = fn(*probe.args, **probe.kwargs)
    return not (_same(result, expected) and _same(_arguments(probe), _arguments(reference)))


def _arguments(sample: Sample) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return sample.args, dict(sample.kwargs)


def checked_call(
    fn: Callable[..., Any], effects: Effects, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None, *,
    op: str = "<op>", signature: Signature | None = None,
) -> tuple[Any, CheckReport]:
    """Call ``fn(*args, **kwargs)`` for real and report undeclared writes, aliases and RNG use of this call."""
    names = _names(fn, signature)
    sample = Sample(tuple(args), dict(kwargs or {}))
    obs = _observe(fn, sample, _operands(sample, names, op))
    observed = _observed_effects([obs], set(), names)
    return obs.result, CheckReport(op, effects, observed, tuple(_undeclared(effects, obs, names, None)), 1)


def _observed_effects(observations: list[_Observation], blind: set[int], names: list[str]) -> Effects:
    """What the op was seen to do; writes are read-write unless the blind-write probe showed them pure."""
    written = {i for obs in observations for i in obs.writes}
    resources = {
        ResourceEffect(Resource("rng", "generator") if g.startswith("generator") else rng(g))
        for obs in observations for g in obs.rng
    }
    return Effects(
        operands=tuple(
            OperandEffect(i, Access.WRITE if i in blind else Access.READ_WRITE, _name(names, i)) for i in written
        ),
        aliases=frozenset(a for obs in observations for a in obs.aliases),
        resources=frozenset(resources),
    )


def check_op(
    fn: Callable[..., Any],
    effects: Effects,
    sample_inputs: Iterable[Sample | tuple[Any, ...] | list[Any]],
    *,
    op: str | None = None,
    signature: Signature | None = None,
) -> CheckReport:
    """Run ``fn`` on clones of each sample and report where its behaviour contradicts ``effects``.

    Operand positions follow ``signature`` (or ``fn``'s Python signature): positional arguments first, keyword
    arguments placed by name. Opaque effects allow everything.

    >>> import torch, effects
    >>> report = check_op(torch.Tensor.add_, effects.make_effects(reads=[0, 1]), [(torch.ones(2), torch.ones(2))])
    >>> [f.kind.name for f in report.findings]
    ['UNDECLARED_WRITE', 'UNDECLARED_ALIAS']

    Raises:
        UnknownOperandError: a sample keyword argument that is not an operand.
        Whatever ``fn`` raises on a sample.
    """
    label = op or getattr(fn, "__qualname__", None) or repr(fn)
    names = _names(fn, signature)
    rng_before = torch.default_generator.get_state()
    findings: list[Finding] = []
    observations: list[_Observation] = []
    blind = {e.index for e in effects.operands if e.access is Access.WRITE} if not effects.opaque else set()
    overwritten: set[int] = set()  # written, and the old contents never mattered (blind-write probe)
    reads_old: set[int] = set()
    try:
        for k, raw in enumerate(sample_inputs):
            sample = _as_sample(raw)
            run = _clone_sample(sample)
            torch.default_generator.set_state(rng_before)
            obs = _observe(fn, run, _operands(run, names, label))
            observations.append(obs)
            findings += _undeclared(effects, obs, names, k)
            for i in sorted(obs.writes):
                if len(obs.groups.get(i, ())) > 1:
                    continue  # perturbing a shared storage would change the other operands too
                if not _reads_blind_write(fn, sample, names, label, i, run, obs.result, rng_before):
                    overwritten.add(i)
                    continue
                reads_old.add(i)
                if i in blind:
                    findings.append(Finding(
                        Lie.BLIND_WRITE_READS, "perturbing its old contents changed the result (the op reads "
                        "them, or leaves some elements unwritten); declare it read-write", i, _name(names, i),
                        sample=k))
    finally:
        torch.default_generator.set_state(rng_before)
    if not effects.opaque and observations:
        findings += _missing(effects, observations, names)
    observed = _observed_effects(observations, overwritten - reads_old, names)
    return CheckReport(label, effects, observed, tuple(findings), len(observations))


def _name(names: list[str], i: int) -> str | None:
    return names[i] if i < len(names) else None


def _missing(effects: Effects, observations: list[_Observation], names: list[str]) -> list[Finding]:
    """Declared writes and definite aliases that no sample showed (judged per storage, like writes)."""
    present = {i for obs in observations for i in obs.groups}
    seen_writes = {j for obs in observations for i in obs.writes for j in obs.groups.get(i, {i})}
    findings = [
        Finding(Lie.MISSING_WRITE, f"no sample wrote it (declared {e.access}); check the operand position",
                e.index, _name(names, e.index))
        for e in effects.operands
        if e.access.writes and e.index in present and e.index not in seen_writes
    ]
    seen_aliases = {
        (a.output, j) for obs in observations for a in obs.aliases for j in obs.groups.get(a.operand, {a.operand})
    }
    findings += [
        Finding(Lie.MISSING_ALIAS, "no sample returned a view of it; declare it may-alias if it only sometimes "
                "is one", a.operand, _name(names, a.operand), a.output)
        for a in sorted(effects.aliases)
        if not a.may and a.operand in present and (a.output, a.operand) not in seen_aliases
    ]
    return findings
