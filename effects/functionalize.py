"""Functionalization: the same program without writes, in which every read sees the latest value of its storage.

Value transforms (autodiff's forward/backward split, VJPs, rematerialization of saved tensors, CSE) read
*dataflow*. In a program with in-place ops a write is a side effect nothing downstream consumes, so for such a
transform the write does not exist: ``h = a @ w; h.relu_(); return h.sum()`` differentiates ``(a @ w).sum()``.
:func:`functionalize` gives those transforms a program whose dataflow *is* its semantics — JAX's state discharge
(``jax/_src/state/discharge.py``) and PyTorch's functionalization (``torch/_subclasses/functional_tensor.py``,
AOTAutograd's epilogue and synthetic bases) do the same job; here it is driven by the declared effects.

The walk (one pass, in program order):

* **Versions per storage.** Values are organised in *view trees*: an output declared a view of an operand
  (:class:`~effects.model.Alias`, definite or *may* — a may-view is treated as a view) is a child of that operand;
  every other value (an input, a fresh result) is a root. Each root has a version number, each value the version
  of its root at which its current functional value was computed. A write to any value of a tree bumps the
  version; a value read with an older version is stale.
* **A write** to value ``v`` (operand positions in :attr:`Effects.written`) becomes a pure instruction computing
  ``v``'s new value (:meth:`Rules.functional`: ``add_`` → ``add``, ``copy_`` → ``copy``, ...). The new value is
  then **scattered** up the tree (:meth:`Rules.scatter`: ``slice`` → ``slice_scatter``, ``t`` → ``t``, ...), each
  ancestor getting a new value, and the version moves on.
* **A read** of a stale view is **replayed**: its view op (:meth:`Rules.replay`: by default the same instruction with
  the parent operand swapped) runs again on the parent's current value, recursively up to a current ancestor.
  Replays are lazy, so a view nobody reads again costs nothing.
* An output that an op declares a view of an operand *it writes* (``add_`` returns ``self``) is that operand: it
  names the same value from then on.
* **Writes without a functional form** — opaque ops, and declared writers the rules cannot express purely — run on
  private copies: every root they may write is cloned (:meth:`Rules.clone`), the op runs unchanged on the clones
  (and on views of them replayed from the clones), and the clones become the roots' new values. Such an
  instruction still writes, but only storage created for it. An opaque op's outputs may alias anything it was
  given: writing one later, or writing storage it was given while one of its outputs is still read, has no value
  semantics to derive and raises :class:`~effects.errors.FunctionalizationError`.
* **Inputs.** An input whose tree was written gets an **epilogue** entry ``(input, final value)``: the caller
  copies the final value into the input after the program (AOTAutograd's epilogue). Inputs that share storage at
  run time (``Program.input_aliases``) need to know *how* they are related: ``input_views`` gives, for each
  non-base member, the view instruction that makes it from another input (``b = aten.t(a)`` for ``f(a, a.t())``;
  ``aten.alias(a)`` for the same tensor twice), or from a *synthetic base* it builds first (AOTAutograd's answer
  when no member contains the others: all members gathered into one tensor, each a view of it). Writing a group
  without that raises.
* **Resources** (RNG draws, IO, collectives) are untouched: the functional instructions keep their resource
  effects, so the functional program's own dependency graph orders them as before.

Cost: one pass, O(instructions + operand uses) plus one instruction per scatter step and per replayed view — linear
in the size of the program it emits.

A may-view (``reshape``, ``contiguous``) is a view unless the caller lists it in ``fresh_outputs``: at run time such
an op copies when its input's strides do not allow a view, and only a caller that knows the strides (or ran the
program: :func:`effects.testing.fresh_may_views`) can tell. Without that knowledge a program that writes such a
copy (or writes its input and reads the copy) gets view semantics — the choice Thunder's ``update_aliases`` makes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .errors import FunctionalizationError
from .graph import resolve_effects
from .model import Effects
from .program import Const, Instruction, Program, format_window
from .registry import Registry

__all__ = ["Functionalized", "Rules", "functionalize"]

Value = Hashable
Operand = object


@dataclass(frozen=True, slots=True)
class Functionalized:
    """The result of :func:`functionalize`.

    ``program`` has the original inputs and returns the functional values of the original returns (in order).
    ``epilogue`` lists ``(input, final value)`` for every input whose storage the original program wrote, in
    input order, then ``(synthetic base, final value)`` for written synthetic bases of ``input_views``; applying it (copying each final value into its input, after the program) leaves the inputs as the
    original program would. ``origin[k]`` names the original instruction emitted instruction ``k`` was derived
    from and how (``"keep"``, ``"functional"``, ``"replay"``, ``"scatter"``, ``"commit"``, ``"clone"``, ``"run"``).
    """

    program: Program
    epilogue: tuple[tuple[Value, Value], ...]
    origin: tuple[tuple[str, int], ...]

    @property
    def mutated_inputs(self) -> tuple[Value, ...]:
        return tuple(inp for inp, _ in self.epilogue)

    def with_epilogue(self, copy_op: Hashable) -> Program:
        """``program`` followed by ``copy_op(input, final)`` for every epilogue entry (``copy_``'s operand order:
        destination first): one program that writes only the inputs, once each, at the end."""
        tail = tuple(Instruction(copy_op, (inp, final), ()) for inp, final in self.epilogue)
        return Program(self.program.instructions + tail, self.program.inputs, self.program.returns,
                       self.program.input_aliases)


class Rules:
    """What :func:`functionalize` needs to know about ops beyond their effects; subclass per op vocabulary.

    Every method receives the original instruction (and its index), with ``inputs`` already renamed to the current
    functional values, and must define exactly the names it is given. The defaults handle replay generically;
    ``functional`` answers ``None`` (run the op on private copies) and ``scatter`` raises.
    """

    def functional(self, index: int, inst: Instruction, inputs: tuple[Operand, ...],
                   new_values: Mapping[tuple[int, int], Value]) -> Sequence[Instruction] | None:
        """Pure instructions computing what ``inst`` leaves in its written operands.

        ``new_values`` maps ``(operand position, element)`` of every written value (element 0 for a tensor
        operand, ``k`` for the ``k``-th tensor of a list operand) to the name its new value must have. Outputs of
        ``inst`` that are not a written operand handed back (``add_`` returns ``self``) must be defined under their
        original names. ``None``: no functional form (the op then runs on private copies).
        """
        return None

    def replay(self, index: int, inst: Instruction, output: int, inputs: tuple[Operand, ...],
               name: Value) -> Instruction:
        """``inst`` (a view op) again on ``inputs`` (its parent operand swapped for the parent's current value),
        defining ``name`` at output ``output`` (other outputs get names nothing uses)."""
        outputs = tuple(name if j == output else _unused(name, j) for j in range(len(inst.outputs)))
        return Instruction(inst.op, inputs, outputs, inst.effects)

    def scatter(self, index: int, inst: Instruction, output: int, base: Value, view: Value,
                name: Value) -> Sequence[Instruction]:
        """Instructions defining ``name`` as ``base`` with the part that output ``output`` of view op ``inst``
        selects replaced by ``view`` (the inverse of the view: ``slice`` → ``slice_scatter``)."""
        raise FunctionalizationError(
            f"cannot write through the result of {inst}: no view-inverse (scatter) rule for this op. Add one to the "
            "rules, or clone the view before writing it."
        )

    def commit(self, index: int, inst: Instruction, root: Value, before: Value, after: Value,
               name: Value) -> Sequence[Instruction] | None:
        """Instructions defining ``name`` as the value of root ``root`` once instruction ``index`` wrote its tree
        (``before`` -> ``after``), or ``None`` (the default) to take ``after`` as it is. The hook for value
        semantics beyond the data: a write autograd does not record (``torch.no_grad``) keeps the root's
        autograd identity, so an autograd adapter commits ``after`` through a straight-through op."""
        return None

    def clone(self, value: Value, name: Value) -> Instruction:
        """A copy of ``value`` in fresh storage, named ``name`` (for ops that run on private copies)."""
        raise FunctionalizationError(
            f"these rules cannot copy {value!r}: an op without a functional form needs Rules.clone"
        )

    def keep(self, index: int, inst: Instruction, inputs: tuple[Operand, ...]) -> Instruction:
        """``inst`` unchanged but for its renamed ``inputs`` (ops that read only)."""
        return dataclasses.replace(inst, inputs=inputs)


def _unused(name: Value, j: int) -> Value:
    return f"{name}#{j}"


@dataclass(slots=True)
class _Node:
    """A value of a view tree: its parent (``None`` for a root) and how it is made from it, and its current
    functional value at which version of its root."""

    root: Value
    parent: Value | None = None
    view: tuple[int, int, int] = (-1, -1, -1)
    """``(instruction index, output index, operand position of the parent)``."""
    current: Value | None = None
    version: int = 0


class _Walk:
    """State of one :func:`functionalize` pass."""

    def __init__(self, program: Program, effects: list[Effects], rules: Rules,
                 fresh_outputs: frozenset[tuple[int, int]]) -> None:
        self.program = program
        self.fresh_outputs = fresh_outputs
        self.effects = effects
        self.rules = rules
        self.nodes: dict[Value, _Node] = {}
        self.same: dict[Value, Value] = {}
        """Outputs that name a written operand (``add_`` returns ``self``) -> that operand's value."""
        self.root_version: dict[Value, int] = {}
        self.tainted: dict[Value, str] = {}
        """Roots whose storage an opaque result may alias -> a description of that op (for the error)."""
        self.shared: dict[Value, frozenset[Value]] = {}
        """Roots of inputs that share storage at run time with other roots (no ``input_views`` for them)."""
        self.synthetic: list[Value] = []
        """Values ``input_views`` define besides inputs (synthetic bases): roots written back by the caller."""
        self.view_instructions: list[Instruction] = []
        """``input_views`` as placed; view step index ``-1 - k`` is the ``k``-th."""
        self.out: list[Instruction] = []
        self.origin: list[tuple[str, int]] = []
        self.counter = 0
        self.taken = {v for inst in program.instructions for v in inst.outputs} | set(program.inputs)

    # --- names and emission ------------------------------------------------------------------------------------
    def fresh(self, value: Value) -> Value:
        """A new name derived from ``value``'s (``t7`` -> ``t7_3``), distinct from every name of the program."""
        while True:
            self.counter += 1
            name = f"{value}_{self.counter}"
            if name not in self.taken:
                return name

    def emit(self, inst: Instruction, kind: str, index: int) -> None:
        self.out.append(inst)
        self.origin.append((kind, index))

    def instruction(self, index: int) -> Instruction:
        """Instruction ``index`` of the program, or input view ``-1 - index`` for a negative index."""
        return self.program.instructions[index] if index >= 0 else self.view_instructions[-1 - index]

    def root(self, value: Value) -> None:
        self.nodes[value] = _Node(value, current=value)
        self.root_version[value] = 0

    def canon(self, value: Value) -> Value:
        return self.same.get(value, value)

    # --- reading -----------------------------------------------------------------------------------------------
    def current(self, value: Value) -> Value:
        """The functional value of ``value`` now, replaying its view chain if a write made it stale."""
        node = self.nodes[self.canon(value)]
        version = self.root_version[node.root]
        if node.version == version and node.current is not None:
            return node.current
        assert node.parent is not None, "a root is always current"
        parent = self.current(node.parent)
        index, output, position = node.view
        inst = self.instruction(index)
        inputs = tuple(_swap(op, parent) if k == position else self.operand(op) for k, op in enumerate(inst.inputs))
        name = self.fresh(inst.outputs[output])
        self.emit(self.rules.replay(index, inst, output, inputs, name), "replay", index)
        node.current, node.version = name, version
        return name

    def operand(self, operand: Operand) -> Operand:
        if isinstance(operand, Const):
            return operand
        if isinstance(operand, tuple):
            return tuple(v if isinstance(v, Const) else self.current(v) for v in operand)
        return self.current(operand)

    def path_to_root(self, value: Value) -> list[Value]:
        path = [self.canon(value)]
        while self.nodes[path[-1]].parent is not None:
            path.append(self.nodes[path[-1]].parent)
        return path

    # --- writing -----------------------------------------------------------------------------------------------
    def write(self, value: Value, new: Value, index: int) -> None:
        """``value`` now holds ``new``: scatter it up to the root and move the root's version on."""
        path = self.path_to_root(value)
        root = path[-1]
        self.check_untainted(root, index)
        # the ancestors' values *before* this write, taken before anything changes
        befores = [self.current(v) for v in path[1:]]
        values = [new]
        for child, before in zip(path, befores):
            view_index, output, _ = self.nodes[child].view
            name = self.fresh(self.nodes[child].parent)  # type: ignore[arg-type]
            for inst in self.rules.scatter(view_index, self.instruction(view_index), output, before,
                                           values[-1], name):
                self.emit(inst, "scatter", view_index)
            values.append(name)
        values[-1] = self.commit(index, root, befores[-1] if befores else self.nodes[root].current, values[-1])
        version = self.root_version[root] + 1
        self.root_version[root] = version
        for v, current in zip(path, values):
            node = self.nodes[v]
            node.current, node.version = current, version

    def replace_root(self, root: Value, before: Value, new: Value, index: int) -> None:
        """Root ``root``'s storage now holds ``new`` (a private copy an op wrote): every view is stale."""
        new = self.commit(index, root, before, new)
        version = self.root_version[root] + 1
        self.root_version[root] = version
        node = self.nodes[root]
        node.current, node.version = new, version

    def commit(self, index: int, root: Value, before: Value, after: Value) -> Value:
        """The root's value after instruction ``index`` wrote it, through :meth:`Rules.commit`."""
        name = self.fresh(root)
        emitted = self.rules.commit(index, self.program.instructions[index], root, before, after, name)
        if emitted is None:
            return after
        for inst in emitted:
            self.emit(inst, "commit", index)
        return name

    def check_untainted(self, root: Value, index: int) -> None:
        """Raise unless writing ``root``'s tree at instruction ``index`` has value semantics."""
        shared = self.shared.get(root)
        if shared is not None:
            inst = self.program.instructions[index]
            raise FunctionalizationError(
                f"instruction {index} ({inst}) writes input {root!r}, which shares storage at run time with "
                f"{sorted(map(str, shared - {root}))}; how they overlap is unknown:\n"
                f"{format_window(self.program, index)}\nPass input_views (each input as a view of another, e.g. "
                "b = aten.t(a)) so the write can be applied to all of them."
            )
        why = self.tainted.get(root)
        if why is not None:
            inst = self.program.instructions[index]
            raise FunctionalizationError(
                f"instruction {index} ({inst}) writes storage that the result of {why} may share; that op's "
                f"effects are unknown, so no value semantics can be derived:\n"
                f"{format_window(self.program, index)}\nDeclare that op's effects (which outputs view which "
                "operands), or clone its result before writing."
            )

    # --- instructions ------------------------------------------------------------------------------------------
    def step(self, index: int, inst: Instruction) -> None:
        eff = self.effects[index]
        written = sorted(eff.written)
        if eff.opaque or written:
            self.writer(index, inst, eff, written)
            return
        self.emit(self.rules.keep(index, inst, self.operand_tuple(inst)), "keep", index)
        self.define_outputs(index, inst, eff, frozenset())

    def operand_tuple(self, inst: Instruction) -> tuple[Operand, ...]:
        return tuple(self.operand(op) for op in inst.inputs)

    def define_outputs(self, index: int, inst: Instruction, eff: Effects, written: frozenset[int]) -> None:
        """Place ``inst``'s outputs: a written operand handed back names that operand; a view of a single tensor
        operand joins its tree; anything else is a new root (tainted if it may alias something unknown)."""
        parents: dict[int, list[int]] = {}
        if not eff.opaque:
            for alias in eff.aliases:
                if not alias.of_output and not (alias.may and (index, alias.output) in self.fresh_outputs):
                    positions = parents.setdefault(alias.output, [])
                    if alias.operand not in positions:  # a definite and a may alias of the same pair
                        positions.append(alias.operand)
        for j, value in enumerate(inst.outputs):
            positions = parents.get(j, [])
            handed_back = [k for k in positions if k in written and len(_values(inst.inputs[k])) == 1]
            if handed_back:
                self.same[value] = self.canon(_values(inst.inputs[handed_back[0]])[0])
                continue
            self.root(value)
            if eff.opaque or any(a.of_output and a.output == j for a in eff.aliases):
                self.taint(value, index, inst)
            elif len(positions) == 1 and len(_values(inst.inputs[positions[0]])) == 1:
                parent = self.canon(_values(inst.inputs[positions[0]])[0])
                node = self.nodes[value]
                node.root, node.parent, node.view = self.nodes[parent].root, parent, (index, j, positions[0])
                node.version = self.root_version[node.root]
                del self.root_version[value]
            elif positions:
                self.taint(value, index, inst)

    def taint(self, value: Value, index: int, inst: Instruction) -> None:
        """``value`` may share storage with ``inst``'s tensor operands in a way nobody declared: writing either
        side later cannot be given value semantics (checked at that write)."""
        why = f"instruction {index} ({inst})"
        self.tainted[value] = why
        for op in inst.inputs:
            for v in _values(op):
                self.tainted[self.nodes[self.canon(v)].root] = why

    def writer(self, index: int, inst: Instruction, eff: Effects, written: list[int]) -> None:
        targets: dict[tuple[int, int], Value] = {}
        for k in written:
            for e, v in enumerate(_values(inst.inputs[k])):
                targets[(k, e)] = self.fresh(self.canon(v))
        inputs = self.operand_tuple(inst)
        form = None if eff.opaque else self.rules.functional(index, inst, inputs, targets)
        if form is None:
            self.on_copies(index, inst, eff, written)
            return
        emitted = [inst_ for inst_ in form]
        self.check_defines(index, inst, emitted, targets, eff, frozenset(written))
        for inst_ in emitted:
            self.emit(inst_, "functional", index)
        for (k, e), name in targets.items():
            self.write(_values(inst.inputs[k])[e], name, index)
        self.define_outputs(index, inst, eff, frozenset(written))

    def check_defines(self, index: int, inst: Instruction, emitted: Sequence[Instruction],
                      targets: Mapping[tuple[int, int], Value], eff: Effects, written: frozenset[int]) -> None:
        defined = [v for i in emitted for v in i.outputs]
        handed_back = {a.output for a in eff.aliases if not a.of_output and a.operand in written}
        wanted = set(targets.values()) | {v for j, v in enumerate(inst.outputs) if j not in handed_back}
        missing = wanted - set(defined)
        if missing or len(defined) != len(set(defined)):
            raise FunctionalizationError(
                f"the functional rule for instruction {index} ({inst}) must define {sorted(map(str, wanted))} once "
                f"each; it defines {list(map(str, defined))}. Fix the rule's functional() for this op."
            )

    def on_copies(self, index: int, inst: Instruction, eff: Effects, written: list[int]) -> None:
        """Run ``inst`` unchanged on private copies of every tree it may write; the copies become those trees'
        new values."""
        touched = range(len(inst.inputs)) if eff.opaque else written
        roots: dict[Value, Value] = {}
        befores: dict[Value, Value] = {}
        for k in touched:
            for v in _values(inst.inputs[k]):
                root = self.nodes[self.canon(v)].root
                if root not in roots:
                    self.check_untainted(root, index)
                    copy = self.fresh(root)
                    befores[root] = self.current(root)
                    self.emit(self.rules.clone(befores[root], copy), "clone", index)
                    roots[root] = copy
        cache: dict[Value, Value] = {}

        def on_copy(value: Value) -> Value:
            """``value`` as a view of its root's private copy (replayed from it), or its current value."""
            value = self.canon(value)
            node = self.nodes[value]
            if node.root not in roots:
                return self.current(value)
            if node.parent is None:
                return roots[node.root]
            if value not in cache:
                view_index, output, position = node.view
                view_inst = self.instruction(view_index)
                inputs = tuple(_swap(op, on_copy(_values(op)[0])) if k == position else self.operand(op)
                               for k, op in enumerate(view_inst.inputs))
                cache[value] = self.fresh(view_inst.outputs[output])
                self.emit(self.rules.replay(view_index, view_inst, output, inputs, cache[value]), "replay",
                          view_index)
            return cache[value]

        inputs = tuple(
            op if isinstance(op, Const) else
            tuple(v if isinstance(v, Const) else on_copy(v) for v in op) if isinstance(op, tuple) else on_copy(op)
            for op in inst.inputs
        )
        self.emit(self.rules.keep(index, inst, inputs), "run", index)
        for root, copy in roots.items():
            self.replace_root(root, befores[root], copy, index)
        self.define_outputs(index, inst, eff, frozenset(written))


def _swap(operand: Operand, value: Value) -> Operand:
    """``operand`` (a view's parent operand: one value, possibly inside a list operand) with that value replaced."""
    if isinstance(operand, tuple):
        return tuple(v if isinstance(v, Const) else value for v in operand)
    return value


def _values(operand: Operand) -> tuple[Value, ...]:
    if isinstance(operand, Const):
        return ()
    if isinstance(operand, tuple):
        return tuple(v for v in operand if not isinstance(v, Const))
    return (operand,)


def functionalize(
    program: Program,
    rules: Rules,
    *,
    input_views: Iterable[Instruction] = (),
    fresh_outputs: Collection[tuple[int, int]] = (),
    registry: Registry | None = None,
    effects_of: Callable[[Instruction], Effects] | None = None,
) -> Functionalized:
    """``program`` without writes, plus the epilogue that writes the inputs (see the module docstring).

    Args:
        program: the program; effects come from ``effects_of``, the instructions' own effects or ``registry``.
        rules: functional forms, view replay and view inverses for the program's ops (e.g.
            :data:`effects.aten_rules.ATEN`).
        input_views: how inputs that share storage at run time are related, as instructions run before the
            program, in order: one defining an input makes it a view of its operand 0
            (``Instruction(aten.t.default, ("a",), ("b",))`` for ``f(a, a.t())``); one defining other values (a
            synthetic base built from the inputs, an index) is emitted first, and its outputs are roots whose
            final values join the epilogue. Needed only when the program writes such a group.
        fresh_outputs: ``(instruction, output)`` pairs declared *may*-views that are known to be fresh copies at
            run time (``reshape`` of a non-contiguous tensor); without this, a may-view is treated as a view.

    Raises:
        FunctionalizationError: a write with no value semantics to derive — through a view the rules cannot
            invert, to storage an opaque result may share, or to inputs that alias at run time without
            ``input_views``; or a rule that does not define what it must. The message names the instruction.
        UndefinedValueError, DuplicateDefinitionError: the program is ill-formed.
    """
    program.check()
    effects = resolve_effects(program, registry, effects_of)
    walk = _Walk(program, effects, rules, frozenset(fresh_outputs))
    _place_inputs(walk, program, tuple(input_views))
    for index, inst in enumerate(program.instructions):
        walk.step(index, inst)
    epilogue = tuple((v, walk.current(v)) for v in (*program.inputs, *walk.synthetic)
                     if walk.nodes[v].parent is None and walk.root_version[v] > 0)
    returns = tuple(walk.current(v) for v in program.returns)
    result = Program(tuple(walk.out), program.inputs, returns, program.input_aliases)
    return Functionalized(result, epilogue, tuple(walk.origin))


def _place_inputs(walk: _Walk, program: Program, input_views: tuple[Instruction, ...]) -> None:
    """Roots for the inputs, then the ``input_views`` in order: one that defines a program input makes it a view
    of the value its operand 0 holds (an input, or a value an earlier input view defined); one that defines other
    values (a synthetic base, an index) is emitted first, reading the arguments as passed, and its outputs are
    roots. Groups of
    ``program.input_aliases`` left with several roots are recorded: writing one of them raises."""
    made = set()
    for view in input_views:
        defined = [v for v in view.outputs if v in program.inputs]
        if defined and (len(view.outputs) != 1 or defined[0] in made):
            raise FunctionalizationError(
                f"input view {view} must define exactly one program input, once (inputs: {list(program.inputs)})"
            )
        made.update(defined)
    for v in program.inputs:
        if v not in made:
            walk.root(v)
    arguments = set(program.inputs)
    for view in input_views:
        unknown = [v for v in _values_of(view) if v not in walk.nodes and v not in arguments]
        if unknown:
            raise FunctionalizationError(
                f"input view {view} reads {unknown[0]!r} before it is defined: input views come in order and read "
                "inputs and values earlier input views define"
            )
        walk.view_instructions.append(view)
        index = -len(walk.view_instructions)
        if view.outputs and view.outputs[0] in made:
            sources = _values(view.inputs[0]) if view.inputs else ()
            if len(sources) != 1:
                raise FunctionalizationError(f"input view {view} must view one value, given as its operand 0")
            parent = walk.canon(sources[0])
            walk.nodes[view.outputs[0]] = _Node(walk.nodes[parent].root, parent, (index, 0, 0), view.outputs[0],
                                                walk.root_version[walk.nodes[parent].root])
            continue
        # a synthetic value reads the arguments as passed (even those it is about to become the base of)
        inputs = tuple(op if all(v in arguments for v in _values(op)) else walk.operand(op) for op in view.inputs)
        walk.emit(walk.rules.keep(index, view, inputs), "keep", index)
        for value in view.outputs:
            walk.root(value)
            walk.synthetic.append(value)
    for group in program.input_aliases:
        roots = frozenset(walk.nodes[v].root for v in group)
        if len(roots) > 1:
            for r in roots:
                walk.shared[r] = roots


def _values_of(inst: Instruction) -> tuple[Value, ...]:
    return tuple(v for op in inst.inputs for v in _values(op))
