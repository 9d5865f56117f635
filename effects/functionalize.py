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
* **Writes without a functional form** — opaque ops, declared writers the rules cannot express purely, and an op
  that writes one storage through two operands (``_foreach_add_([x, x.t()], ...)``: its writes see each other) — run on
  private copies: every root they may write is cloned (:meth:`Rules.clone`), the op runs unchanged on the clones
  (and on views of them replayed from the clones), and the clones become the roots' new values — or, where the op
  writes a clone directly and hands it back as an output (``index_add_`` returns ``self``), that output: the same
  tensor, read through a data dependency on the op (passes that order by dataflow alone keep the op first). A view
  whose replay copies (:meth:`Rules.replay_copies`: a synthetic base's gather) is scattered back after the op. Such
  an instruction still writes, but only storage created for it. An opaque op's outputs may alias anything it was
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

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .errors import FunctionalizationError
from ._util import gc_paused
from .graph import resolve_effects
from .model import Effects
from .program import Const, Instruction, Program, format_window, operand_values
from .registry import Registry

__all__ = ["Functionalized", "Rules", "functionalize"]

Value = Hashable
Operand = object


@dataclass(frozen=True, slots=True)
class Functionalized:
    """The result of :func:`functionalize`.

    ``program`` has the original inputs and returns the functional values of the original returns (in order).
    ``epilogue`` lists ``(input, final value)`` for every input whose storage the original program wrote, in
    input order, then ``(synthetic base, final value)`` for written synthetic bases of ``input_views``; applying
    it (copying each final value into its input, after the program) leaves the inputs as the original program
    would. ``origin[k]`` names the original instruction emitted instruction ``k`` was derived from and how
    (``"keep"``, ``"functional"``, ``"replay"``, ``"scatter"``, ``"commit"``, ``"clone"``, ``"run"``; a negative
    index is an input view).
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

    def replay_copies(self, index: int, inst: Instruction) -> bool:
        """Whether replaying view ``inst`` gives a copy of the selected part rather than storage shared with the
        parent (a synthetic base's gather: each member is a view *in value* only). An op run on private copies writes
        such a view's copy, which the walk then scatters back into the parent's. Default ``False``."""
        return False

    def commit(self, index: int, inst: Instruction, root: Value, before: Value, after: Value,
               name: Value) -> Sequence[Instruction] | None:
        """Instructions defining ``name`` as the value of root ``root`` once instruction ``index`` wrote its tree
        (``before`` -> ``after``), or ``None`` (the default) to take ``after`` as it is. The hook for value
        semantics beyond the data: a write autograd does not record (``torch.no_grad``) keeps the root's
        autograd identity, so an autograd adapter commits ``after`` through a straight-through op. A root given a new
        value here is the one the written views see: they are read again from it (replayed)."""
        return None

    def clone(self, value: Value, name: Value) -> Instruction:
        """A copy of ``value`` in fresh storage, named ``name`` (for ops that run on private copies)."""
        raise FunctionalizationError(
            f"these rules cannot copy {value!r}: an op without a functional form needs Rules.clone"
        )

    def keep(self, index: int, inst: Instruction, inputs: tuple[Operand, ...]) -> Instruction:
        """``inst`` unchanged but for its renamed ``inputs`` (ops that read only; called only when an operand was
        renamed, and for ops run on private copies)."""
        return Instruction(inst.op, inputs, inst.outputs, inst.effects, inst.attrs)


def _unused(name: Value, j: int) -> Value:
    return f"{name}#{j}"


class _Node:
    """A value of a view tree: its canonical name, its root, its parent (``None`` for a root) and how it is made
    from it, and its current functional value at which version of its root. A root's ``version`` is the version
    of its tree, so a node is current iff ``version == top.version``."""

    __slots__ = ("name", "root", "top", "parent", "view", "current", "version")

    def __init__(self, name: Value) -> None:
        self.name = name
        self.root = name
        self.top = self
        self.parent: _Node | None = None
        self.view = (-1, -1, -1)
        """``(instruction index, output index, operand position of the parent)``."""
        self.current = name
        self.version = 0


class _Plan:
    """What the walk needs from one distinct :class:`Effects` (computed once per object, not per instruction)."""

    __slots__ = ("opaque", "written", "written_set", "views", "of_output", "handed_back", "simple", "back")

    def __init__(self, eff: Effects) -> None:
        self.opaque = eff.opaque
        self.written = tuple(sorted(eff.written))
        self.written_set = frozenset(self.written)
        self.views: dict[int, list[tuple[int, bool]]] = {}
        """Output -> ``(operand, may)`` for every alias of an operand (in the effects' own order)."""
        self.of_output: set[int] = set()
        if not eff.opaque:
            for alias in eff.aliases:
                if alias.of_output:
                    self.of_output.add(alias.output)
                else:
                    self.views.setdefault(alias.output, []).append((alias.operand, alias.may))
        self.handed_back = frozenset(o for o, ops in self.views.items() if any(k in self.written_set for k, _ in ops))
        """Outputs that are a written operand handed back (``add_`` returns ``self``)."""
        self.simple = not (self.opaque or self.written or self.views or self.of_output)
        """Reads only, and every output is fresh."""
        definite = not any(may for ops in self.views.values() for _, may in ops)
        self.back = {o: next(k for k, _ in ops if k in self.written_set) for o, ops in self.views.items()
                     if o in self.handed_back} if definite and not self.of_output else None
        """Output -> the written operand it hands back, when that never depends on ``fresh_outputs``."""


class _Walk:
    """State of one :func:`functionalize` pass."""

    def __init__(self, program: Program, effects: list[Effects], rules: Rules,
                 fresh_outputs: frozenset[tuple[int, int]]) -> None:
        self.program = program
        self.fresh_outputs = fresh_outputs
        self.effects = effects
        self.rules = rules
        self.nodes: dict[Value, _Node] = {}
        """Every value -> its node; an output that names a written operand (``add_`` returns ``self``) maps to
        that operand's node."""
        self.tainted: dict[Value, str] = {}
        """Roots whose storage an opaque result may alias -> a description of that op (for the error)."""
        self.shared: dict[Value, frozenset[Value]] = {}
        """Roots of inputs that share storage at run time with other roots (no ``input_views`` for them)."""
        self.view_instructions: list[Instruction] = []
        """``input_views`` as placed; view step index ``-1 - k`` is the ``k``-th."""
        self.commits = type(rules).commit is not Rules.commit
        self.synthetic: list[Value] = []
        """Values ``input_views`` define besides inputs (synthetic bases): roots written back by the caller."""
        self.out: list[Instruction] = []
        self.origin: list[tuple[str, int]] = []
        self.counter = 0
        self.taken = {v for inst in program.instructions for v in inst.outputs}
        self.taken.update(program.inputs)
        self.plans: dict[int, tuple[Effects, _Plan]] = {}

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

    def root(self, value: Value) -> _Node:
        if value in self.nodes:
            self.program.check()  # raises DuplicateDefinitionError naming the instruction
        node = self.nodes[value] = _Node(value)
        return node

    def plan(self, index: int) -> _Plan:
        eff = self.effects[index]
        entry = self.plans.get(id(eff))
        if entry is None:
            entry = self.plans[id(eff)] = (eff, _Plan(eff))  # keep eff alive so its id stays unique
        return entry[1]

    # --- reading -----------------------------------------------------------------------------------------------
    def current(self, value: Value) -> Value:
        """The functional value of ``value`` now, replaying its view chain if a write made it stale."""
        return self.current_of(self.nodes[value])

    def current_of(self, node: _Node) -> Value:
        if node.version == node.top.version:
            return node.current
        parent = self.current_of(node.parent)  # type: ignore[arg-type]  # a root is always current
        index, output, position = node.view
        inst = self.instruction(index)
        inputs = tuple(_swap(op, parent) if k == position else self.operand(op) for k, op in enumerate(inst.inputs))
        name = self.fresh(inst.outputs[output])
        self.emit(self.rules.replay(index, inst, output, inputs, name), "replay", index)
        node.current, node.version = name, node.top.version
        return name

    def operand(self, operand: Operand) -> Operand:
        if isinstance(operand, Const):
            return operand
        if isinstance(operand, tuple):
            return tuple(v if isinstance(v, Const) else self.current(v) for v in operand)
        return self.current(operand)

    def operand_tuple(self, inst: Instruction) -> tuple[Operand, ...]:
        """The operands renamed to their current values; ``inst.inputs`` itself if none changed."""
        get = self.nodes.get
        inputs = []
        for op in inst.inputs:
            node = get(op)  # None for a Const or a list operand: neither is ever a value
            if node is None:
                inputs.append(self.operand(op))
            elif node.version == node.top.version:
                inputs.append(node.current)
            else:
                inputs.append(self.current_of(node))
        renamed = tuple(inputs)
        return inst.inputs if renamed == inst.inputs else renamed

    # --- writing -----------------------------------------------------------------------------------------------
    def write(self, value: Value, new: Value, index: int) -> None:
        """``value`` now holds ``new``: scatter it up to the root and move the root's version on."""
        node = self.nodes[value]
        top = node.top
        if self.shared or self.tainted:
            self.check_untainted(top.name, index)
        if node is top:
            top.current, top.version = self.commit(index, top, top.current, new), top.version + 1
            return
        path = [node]
        while path[-1].parent is not None:
            path.append(path[-1].parent)
        # the ancestors' values *before* this write, taken before anything changes
        befores = [self.current_of(v) for v in path[1:]]
        values = self.scatter_up(path, befores, new, index)
        committed = self.commit(index, top, befores[-1], values[-1])
        version = top.version + 1
        if committed != values[-1]:  # the root's value is the commit's: the views on the path are replayed from it
            top.current, top.version = committed, version
            return
        for v, current in zip(path, values, strict=True):
            v.current, v.version = current, version

    def scatter_up(self, path: Sequence[_Node], befores: Sequence[Value], new: Value, index: int) -> list[Value]:
        """The values of ``path`` (a view, then its ancestors up to the root) once the view holds ``new``, each
        ancestor its value ``before`` with the child's part replaced (:meth:`Rules.scatter`)."""
        values = [new]
        for child, before in zip(path, befores, strict=False):
            view_index, output, _ = child.view
            name = self.fresh(child.parent.name)  # type: ignore[union-attr]
            try:
                scattered = self.rules.scatter(view_index, self.instruction(view_index), output, before,
                                               values[-1], name)
            except FunctionalizationError as exc:
                raise FunctionalizationError(
                    f"instruction {index} ({self.program.instructions[index]}) writes through a view that cannot be "
                    f"written back: {exc}\n{format_window(self.program, index)}"
                ) from None
            for inst in scattered:
                self.emit(inst, "scatter", view_index)
            values.append(name)
        return values

    def replace_root(self, top: _Node, before: Value, new: Value, index: int) -> None:
        """A root's storage now holds ``new`` (a private copy an op wrote): every view is stale."""
        top.current, top.version = self.commit(index, top, before, new), top.version + 1

    def commit(self, index: int, top: _Node, before: Value, after: Value) -> Value:
        """The root's value after instruction ``index`` wrote it, through :meth:`Rules.commit` (asked only when the
        rules override it, so that other rules' programs are numbered as if the hook did not exist)."""
        if not self.commits:
            return after
        name = self.fresh(top.name)
        emitted = self.rules.commit(index, self.program.instructions[index], top.name, before, after, name)
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
    def step(self, index: int, inst: Instruction, eff: Effects) -> None:
        entry = self.plans.get(id(eff))
        plan = entry[1] if entry is not None else self.plan(index)
        if plan.opaque or plan.written:
            self.writer(index, inst, plan)
            return
        inputs = self.operand_tuple(inst)
        self.out.append(inst if inputs is inst.inputs else self.rules.keep(index, inst, inputs))
        self.origin.append(("keep", index))
        if plan.simple:
            nodes = self.nodes
            for value in inst.outputs:
                if value in nodes:
                    self.program.check()  # raises DuplicateDefinitionError naming the instruction
                nodes[value] = _Node(value)
        else:
            self.define_outputs(index, inst, plan)

    def define_outputs(self, index: int, inst: Instruction, plan: _Plan) -> None:
        """Place ``inst``'s outputs: a written operand handed back names that operand; a view of a single tensor
        operand joins its tree; anything else is a new root (tainted if it may alias something unknown)."""
        if plan.back is not None and self.hand_back(inst, plan.back):
            return
        fresh = self.fresh_outputs
        for j, value in enumerate(inst.outputs):
            positions = list(dict.fromkeys(k for k, may in plan.views.get(j, ()) if not (may and (index, j) in fresh)))
            back = next((k for k in positions if k in plan.written_set and _one(inst.inputs[k]) is not None), None)
            if back is not None:
                self.nodes[value] = self.nodes[_one(inst.inputs[back])]
                continue
            node = self.root(value)
            if plan.opaque or j in plan.of_output:
                self.taint(value, index, inst)
            elif len(positions) == 1 and _one(inst.inputs[positions[0]]) is not None:
                parent = self.nodes[_one(inst.inputs[positions[0]])]
                node.root, node.top, node.parent, node.view = parent.root, parent.top, parent, (index, j, positions[0])
                node.version = parent.top.version
            elif positions:
                self.taint(value, index, inst)

    def hand_back(self, inst: Instruction, back: Mapping[int, int]) -> bool:
        """Name every output by the written tensor operand it hands back, if each does (``add_``); else ``False``
        (the general rule then places the outputs)."""
        nodes = self.nodes
        for j, value in enumerate(inst.outputs):
            k = back.get(j)
            if k is None or _one(inst.inputs[k]) is None:
                return False
            nodes[value] = nodes[_one(inst.inputs[k])]
        return True

    def taint(self, value: Value, index: int, inst: Instruction) -> None:
        """``value`` may share storage with ``inst``'s tensor operands in a way nobody declared: writing either
        side later cannot be given value semantics (checked at that write)."""
        why = f"instruction {index} ({inst})"
        self.tainted[value] = why
        for op in inst.inputs:
            for v in operand_values(op):
                self.tainted[self.nodes[v].root] = why

    def writer(self, index: int, inst: Instruction, plan: _Plan) -> None:
        written: list[tuple[tuple[int, int], Value]] = []
        targets: dict[tuple[int, int], Value] = {}
        for k in plan.written:
            for e, v in enumerate(operand_values(inst.inputs[k])):
                written.append(((k, e), v))
                targets[(k, e)] = self.fresh(self.nodes[v].name)
        trees = {id(self.nodes[v].top) for _, v in written}
        inputs = self.operand_tuple(inst)
        # one storage written through two operands: its writes must see each other, so the op runs on real memory
        form = None if plan.opaque or len(trees) < len(written) else self.rules.functional(index, inst, inputs,
                                                                                            targets)
        if form is None:
            self.on_copies(index, inst, plan)
            return
        emitted = list(form)
        if not (len(emitted) == 1 and emitted[0].outputs == tuple(targets.values())
                and all(j in plan.handed_back for j in range(len(inst.outputs)))):  # else: not the usual shape
            self.check_defines(index, inst, emitted, targets, plan)
        for inst_ in emitted:
            self.emit(inst_, "functional", index)
        for key, v in written:
            self.write(v, targets[key], index)
        self.define_outputs(index, inst, plan)

    def check_defines(self, index: int, inst: Instruction, emitted: Sequence[Instruction],
                      targets: Mapping[tuple[int, int], Value], plan: _Plan) -> None:
        defined = [v for i in emitted for v in i.outputs]
        wanted = set(targets.values())
        wanted.update(v for j, v in enumerate(inst.outputs) if j not in plan.handed_back)
        unique = set(defined)
        if len(unique) != len(defined) or not wanted <= unique:
            raise FunctionalizationError(
                f"the functional rule for instruction {index} ({inst}) must define {sorted(map(str, wanted))} once "
                f"each; it defines {list(map(str, defined))}. Fix the rule's functional() for this op."
            )

    def on_copies(self, index: int, inst: Instruction, plan: _Plan) -> None:
        """Run ``inst`` unchanged on private copies of every tree it may write; the copies become those trees'
        new values."""
        touched = range(len(inst.inputs)) if plan.opaque else plan.written
        roots: dict[Value, tuple[_Node, Value, Value]] = {}
        for k in touched:
            for v in operand_values(inst.inputs[k]):
                top = self.nodes[v].top
                if top.name not in roots:
                    self.check_untainted(top.name, index)
                    copy = self.fresh(top.name)
                    before = self.current_of(top)
                    self.emit(self.rules.clone(before, copy), "clone", index)
                    roots[top.name] = (top, before, copy)
        cache: dict[Value, Value] = {}

        def on_copy(node: _Node) -> Value:
            """``node`` as a view of its root's private copy (replayed from it), or its current value."""
            if node.root not in roots:
                return self.current_of(node)
            if node.parent is None:
                return roots[node.root][2]
            if node.name not in cache:
                view_index, output, position = node.view
                view_inst = self.instruction(view_index)
                inputs = tuple(_swap(op, on_copy(node.parent)) if k == position else self.operand(op)
                               for k, op in enumerate(view_inst.inputs))
                cache[node.name] = self.fresh(view_inst.outputs[output])
                self.emit(self.rules.replay(view_index, view_inst, output, inputs, cache[node.name]), "replay",
                          view_index)
            return cache[node.name]

        inputs = tuple(
            op if isinstance(op, Const) else
            tuple(v if isinstance(v, Const) else on_copy(self.nodes[v]) for v in op) if isinstance(op, tuple)
            else on_copy(self.nodes[op])
            for op in inst.inputs
        )
        self.emit(self.rules.keep(index, inst, inputs), "run", index)
        handed = self.handed_back_copies(inst, plan, inputs, {copy: top for top, _, copy in roots.values()})
        news = {name: handed.get(name, copy) for name, (_, _, copy) in roots.items()}
        self.scatter_copied_views(index, inst, touched, on_copy, news)
        for top, before, _ in roots.values():
            self.replace_root(top, before, news[top.name], index)
        self.define_outputs(index, inst, plan)

    def scatter_copied_views(self, index: int, inst: Instruction, touched: Iterable[int],
                             on_copy: Callable[[_Node], Value], news: dict[Value, Value]) -> None:
        """After an op ran on private copies: a touched operand whose view chain replays as a copy
        (:meth:`Rules.replay_copies`) was written in that copy only, so scatter it back into its root's new value
        (``news``, updated in place)."""
        scattered: dict[Value, Value] = {}
        for k in touched:
            for v in operand_values(inst.inputs[k]):
                node = self.nodes[v]
                path = [node]
                while path[-1].parent is not None:
                    path.append(path[-1].parent)
                if not any(self.rules.replay_copies(n.view[0], self.instruction(n.view[0])) for n in path[:-1]):
                    continue
                root = node.top.name
                other = scattered.setdefault(root, node.name)
                if other != node.name:
                    raise FunctionalizationError(
                        f"instruction {index} ({inst}) may write both {other!r} and {node.name!r}, which share "
                        f"storage at run time, and has no functional form: the order in which it writes their common "
                        f"memory is unknown.\n{format_window(self.program, index)}\nPass the tensor once, or clone "
                        "one of them before the call."
                    )
                befores = [on_copy(n) for n in path[1:-1]] + [news[root]]
                news[root] = self.scatter_up(path, befores, on_copy(node), index)[-1]

    def handed_back_copies(self, inst: Instruction, plan: _Plan, inputs: Sequence[Operand],
                           copies: Mapping[Value, _Node]) -> dict[Value, Value]:
        """Roots whose private copy the op wrote directly and hands back as an output (``index_add_`` returns
        ``self``) -> that output. The output, not the copy, becomes the root's new value: it is the same tensor, but
        reading it depends on the op by dataflow — a pass that orders by dataflow alone (an autograd split) keeps
        the op before the reads — and it carries the op's result metadata (a metadata change)."""
        if plan.back is None:
            return {}
        found: dict[Value, Value] = {}
        for j, k in plan.back.items():
            value = _one(inputs[k]) if k < len(inputs) else None
            top = copies.get(value) if value is not None else None
            if top is not None and top.name not in found:
                found[top.name] = inst.outputs[j]
        return found


def _one(operand: Operand) -> Value | None:
    """The value of an operand that holds exactly one (possibly inside a list operand), else ``None``."""
    values = operand_values(operand)
    return values[0] if len(values) == 1 else None


def _swap(operand: Operand, value: Value) -> Operand:
    """``operand`` (a view's parent operand: one value, possibly inside a list operand) with that value replaced."""
    if isinstance(operand, tuple):
        return tuple(v if isinstance(v, Const) else value for v in operand)
    return value


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
    effects = resolve_effects(program, registry, effects_of)
    walk = _Walk(program, effects, rules, frozenset(fresh_outputs))
    try:
        with gc_paused():
            _place_inputs(walk, program, tuple(input_views))
            step = walk.step
            for index, (inst, eff) in enumerate(zip(program.instructions, effects, strict=True)):
                step(index, inst, eff)
            epilogue = tuple((v, walk.current(v)) for v in (*program.inputs, *walk.synthetic)
                             if walk.nodes[v].parent is None and walk.nodes[v].version > 0)
            returns = tuple(walk.current(v) for v in program.returns)
    except KeyError:
        program.check()  # an undefined value: raises UndefinedValueError naming the instruction
        raise
    result = Program(tuple(walk.out), program.inputs, returns, program.input_aliases)
    return Functionalized(result, epilogue, tuple(walk.origin))


def _place_inputs(walk: _Walk, program: Program, input_views: tuple[Instruction, ...]) -> None:
    """Roots for the inputs, then the ``input_views`` in order: one that defines a program input makes it a view
    of the value its operand 0 holds (an input, or a value an earlier input view defined); one that defines other
    values (a synthetic base, an index) is emitted first, reading the arguments as passed, and its outputs are
    roots. Groups of ``program.input_aliases`` left with several roots are recorded: writing one of them
    raises."""
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
            source = _one(view.inputs[0]) if view.inputs else None
            if source is None:
                raise FunctionalizationError(f"input view {view} must view one value, given as its operand 0")
            parent = walk.nodes[source]
            node = walk.root(view.outputs[0])
            node.root, node.top, node.parent, node.view = parent.root, parent.top, parent, (index, 0, 0)
            node.version = parent.top.version
            continue
        # a synthetic value reads the arguments as passed (even those it is about to become the base of)
        inputs = tuple(op if all(v in arguments for v in operand_values(op)) else walk.operand(op)
                       for op in view.inputs)
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
    return tuple(v for op in inst.inputs for v in operand_values(op))
