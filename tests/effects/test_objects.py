"""The object heap (:mod:`effects.objects`): identity not path, final state in program order, escaping new objects
first, restored slots skipped, interpreter-owned objects never recorded, slots as ordered resources."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import effects
from effects import DELETED, Heap, Materialize, Slot, SlotKind, Write

ATTR, ITEM, CONTENTS = SlotKind.ATTR, SlotKind.ITEM, SlotKind.CONTENTS


class Obj:
    pass


def test_two_routes_to_one_object_are_one_object() -> None:
    heap, weight = Heap(), torch.ones(2)
    a = heap.track(weight, "model.a.weight")
    b = heap.track(weight, "model.b.weight")
    heap.track(torch.ones(2), "model.c.weight")
    assert a == b
    assert heap.routes(weight) == ("model.a.weight", "model.b.weight")
    assert list(heap.shared()) == [("model.a.weight", "model.b.weight")]


def test_a_write_through_one_route_is_seen_as_the_objects() -> None:
    heap, opt = Heap(), Obj()
    heap.track(opt, "sched.optimizer")
    heap.track(opt, "opt")
    heap.write(opt, ATTR, "_opt_called", True)
    (step,) = heap.plan()
    assert step == Write(Slot(id(opt), ATTR, "_opt_called"), opt, True, "sched.optimizer")


def test_final_value_in_the_order_of_last_assignment() -> None:
    heap, obj = Heap(), Obj()
    heap.track(obj, "m")
    heap.write(obj, ATTR, "x", 1, before=0)
    heap.write(obj, ATTR, "y", 2, before=0)
    heap.write(obj, ATTR, "x", 3)
    assert [(s.slot.key, s.value) for s in heap.plan()] == [("y", 2), ("x", 3)]


def test_a_restored_slot_costs_nothing() -> None:
    heap, obj, flag = Heap(), Obj(), object()
    heap.track(obj, "m")
    heap.write(obj, ATTR, "collector", {}, before=flag)
    heap.write(obj, ATTR, "collector", flag)
    assert heap.plan() == ()


def test_deletion_is_a_value() -> None:
    heap, d = Heap(), {"k": 1}
    heap.track(d, "cfg")
    heap.write(d, ITEM, "k", DELETED, before=1)
    assert [s.value for s in heap.plan()] == [DELETED]


def test_created_objects_that_escape_come_first_temporaries_are_dropped() -> None:
    heap, cache, layer, temp, returned = Heap(), Obj(), Obj(), Obj(), Obj()
    heap.track(cache, "cache")
    for made in (layer, temp, returned):
        heap.track(made, created=True)
    heap.write(temp, ATTR, "scratch", 1)             # never reaches the caller
    heap.write(layer, ATTR, "keys", "k")
    heap.write(cache, CONTENTS, None, [layer])       # the caller's list now holds the new layer
    heap.write(returned, ATTR, "v", 2)
    heap.escape(returned)
    plan = heap.plan()
    assert plan[:2] == (Materialize(layer, "<Obj made in the call>"), Materialize(returned, "<Obj made in the call>"))
    assert [(s.target, s.slot.key) for s in plan[2:]] == [(layer, "keys"), (cache, None), (returned, "v")]


def test_created_objects_reachable_through_created_objects_live() -> None:
    heap, root, outer, inner = Heap(), Obj(), Obj(), Obj()
    heap.track(root, "root")
    heap.track(outer, created=True)
    heap.track(inner, created=True)
    heap.write(outer, ATTR, "child", inner)
    heap.write(root, ATTR, "made", outer)
    assert [s.target for s in heap.plan() if isinstance(s, Materialize)] == [outer, inner]


@pytest.mark.parametrize("make", [torch.no_grad, torch.enable_grad, torch.inference_mode,
                                  lambda: torch.set_grad_enabled(torch.is_grad_enabled()),
                                  lambda: torch.autocast("cpu")],
                         ids=["no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "autocast"])
def test_context_managers_are_interpreter_owned(make: Callable[[], object]) -> None:
    """(Made in the test: ``set_grad_enabled(mode)`` sets the mode when constructed.)"""
    heap, manager = Heap(), make()
    assert effects.interpreter_owned(manager)
    assert heap.write(manager, ATTR, "prev", True) is False
    assert heap.plan() == () and heap.written() == frozenset()


def test_reads_before_writes_are_what_the_trace_assumed() -> None:
    heap, d = Heap(), {"lr": 0.1}
    heap.read(d, ITEM, "lr", 0.1)
    heap.write(d, ITEM, "lr", 0.2)
    heap.read(d, ITEM, "lr", 0.2)  # served by the pending write: not an assumption about the caller's dict
    assert heap.reads() == {Slot(id(d), ITEM, "lr"): 0.1}
    assert heap.written() == {Slot(id(d), ITEM, "lr")}


def test_slots_are_ordered_resources_in_the_dependency_graph() -> None:
    obj = Obj()
    lr = Slot(id(obj), ATTR, "lr").resource
    other = Slot(id(obj), ATTR, "momentum").resource
    assert lr != other and str(lr).startswith("obj[")
    read_lr = effects.make_effects(resources=[lr])
    write_other = effects.make_effects(resources=[other])
    prog = effects.Program(inputs=(), instructions=(
        effects.Instruction("set_lr", (), (), read_lr), effects.Instruction("set_m", (), (), write_other),
        effects.Instruction("get_lr", (), (), read_lr)))
    graph = effects.DependencyGraph.build(prog)
    assert graph.path(0, 2) and not graph.path(0, 1)


def test_refusal_names_every_route_and_the_slot() -> None:
    heap, opt = Heap(), Obj()
    heap.track(opt, "opt")
    heap.track(opt, "sched.optimizer")
    heap.write(opt, ITEM, "history", [1, 2])
    (step,) = heap.plan()
    err = heap.refuse(step, "a list", "Keep it outside the jitted function.")
    assert isinstance(err, effects.ObjectStateError) and isinstance(err, NotImplementedError)
    assert "opt = sched.optimizer['history']" in str(err) and "Keep it outside" in str(err)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3)), max_size=12))
def test_plan_replays_to_the_final_state(writes: list[tuple[str, int]]) -> None:
    """Replaying the plan onto a copy of the start state gives the state the writes left, whatever they were."""
    start = {"a": 0, "b": 1, "c": 2}
    heap, live = Heap(), dict(start)
    heap.track(live, "d")
    for key, value in writes:
        heap.write(live, ITEM, key, value, before=start[key])
        live[key] = value
    replayed = dict(start)
    for step in heap.plan():
        replayed[step.slot.key] = step.value
    assert replayed == live
