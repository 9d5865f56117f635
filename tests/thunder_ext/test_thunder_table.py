"""The tables of private Thunder names read and of attributes attached to Thunder objects
(:mod:`thunder_ext.host.names`): pinned against the installed Thunder, and the only place such names appear."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("thunder")

import thunder_ext  # noqa: E402,F401
from thunder_ext.host import names as _thunder, reliances  # noqa: E402

EXPECTED_PRIVATE_NAMES = (
    "thunder.torch._torch_to_thunder_function_map",
    "thunder.torch._syms_returning_views",
    "thunder.torch._syms_that_may_return_views",
    "thunder.torch.langctx._method_name_to_fn_map",
    "thunder.torch.langctx._property_name_to_fn_map",
    "thunder.core.interpreter._default_opcode_handler_map",
    "thunder.core.jit_ext._general_jit_lookaside_map",
    "thunder.core.transforms._grad_fn_map",
    "thunder.torch._copy_",
    "thunder.core.jit_ext._infer_name_postfix_from_provenance",
    "thunder.core.proxies._infer_tensor_properties",
    "thunder.core.interpreter._interpret_call",
    "thunder.core.interpreter._object_getattribute_lookaside",
    "thunder.core.interpreter.InterpreterRuntimeCtx._known_wrappers",
    "thunder.core.jit_ext.JitCtx._additional_outputs",
    "thunder.core.jit_ext.JitCtx._constraints",
    "thunder.core.interpreter.InterpreterRuntimeCtx._proxied_values",
    "thunder.core.proxies.NumberProxy._elementwise_binary_helper",
    "thunder.core.proxies.NumberProxy._elementwise_unary_helper",
    "thunder.core.trace.TraceCtx._siginfo",
    "thunder.executors.passes._update_fusion_call_ctx",
    "thunder.core.symbol.Symbol._bind_postprocess",
    "thunder.core.symbol.BoundSymbol._call_ctx",
    "thunder.core.module.ThunderModule._forward_fn",
    "thunder.core.symbol.BoundSymbol.flat_outs",
    "thunder.core.symbol.BoundSymbol.flat_proxy_args",
    "thunder.executors.utils.Region.bound_symbols",
    "thunder.executors.utils.Region.inputs",
    "thunder.executors.utils.Region.outputs",
    "thunder._cache_info_ctx",
    "thunder.core.compile_data._compile_data",
    "thunder.executors.pythonex._check_tensor_shape_and_metadata_impl",
    "thunder.executors.pythonex._check_len_impl",
    "thunder.executors.pythonex._check_literal_like_impl",
    "thunder.executors.pythonex._check_number_type_and_value_impl",
    "thunder.executors.pythonex._check_string_value_impl",
)
"""lightning-thunder 0.2.6. A new private read belongs in the table and here, with a reason."""

EXPECTED_STASHES = (
    "thunder.common.CompileData._thunder_effects_input_aliases",
    "thunder.common.CompileData._thunder_effects_placed_aliases",
    "thunder.common.CompileData._thunder_effects_epilogue_writes",
    "thunder.common.CompileData._thunder_effects_rebound",
    "thunder.core.trace.TraceCtx._thunder_effects_dce_fixpoint",
    "thunder.core.symbol.BoundSymbol._thunder_effects_resolved",
    "thunder.core.symbol.BoundSymbol._thunder_effects_fused",
    "thunder.transforms.cudagraph.CUDAGraphRunner._thunder_effects_runner",
    "thunder.core.jit_ext.JitCtx._thunder_effects_guarded_dicts",
    "thunder.core.jit_ext.JitCtx._thunder_effects_dict_writes",
    "thunder.core.jit_ext.JitCtx._thunder_effects_guarded_lists",
    "thunder.core.jit_ext.JitCtx._thunder_effects_list_writes",
    "thunder.core.jit_ext.JitCtx._thunder_effects_created_fields",
    "thunder.core.jit_ext.JitCtx._thunder_effects_epilogue_objects",
    "thunder.core.jit_ext.JitCtx._thunder_effects_hooks",
    "thunder.transforms.cudagraph.CUDAGraphRunner.call_cuda_graph",
    "thunder.transforms.cudagraph.CUDAGraphRunner.build_cuda_graph",
)

TORCH_PRIVATE = frozenset({"_C", "_ops", "_schema", "_qualified_op_name", "_jit_resolve_packet",
                           "_len_torch_function_stack", "_len_torch_dispatch_stack", "_GLOBAL_DEVICE_CONTEXT",
                           "_InferenceMode", "_group_tensors_by_device_and_dtype", "_local_scalar_dense",
                           "_modules"})
"""torch's operator API as ``torch.library`` itself uses it (schemas of overloads, overload resolution, the ATen op
``item`` lowers to), and what ``torch.get_default_device`` reads (the function-mode stack depth, the global device
context: ``fast_call.default_device``) and the dispatch-mode stack depth beside it (``direct_regions``' checks), the
guard ``torch.inference_mode`` enters (``interpreter_state``'s lookaside), and the C grouping ``torch.nn.utils``'
gradient clipping calls (``optimizers``' lookaside), and ``nn.Module``'s child table, read in the trace as
``named_modules`` reads it (``named_members``' walk)."""

PACKAGE = Path(thunder_ext.__file__).resolve().parent


def _resolve(dotted: str) -> object:
    """A module, or a class inside one, from its dotted path."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(dotted)


EXPECTED_RELIANCES = (
    ("closure read", "thunder.torch.experimental.dtensor_torch_and_prims.dispatch_to_impl"),
    ("closure read", "thunder.executors.torch_compile.TorchCompileExecutor.fusion_pass"),
    ("closure read", "thunder.transforms.cudagraph.CUDAGraphTransform.generate_fused_trace"),
    ("closure read", "thunder.jit.<locals>.prologue_execution_timer.<locals>.wrapped"),
    ("globals swap", "thunder.executors.pythonex (the generated prologue's globals)"),
    ("globals swap", "thunder.core.jit_ext.unpack_inputs"),
    ("wrapper peel", "thunder.__init__ (the epilogue's torch.no_grad and no_autocast decorators)"),
    ("bytecode scan", "thunder.executors.torch_compile.TorchCompileExecutor.fusion_pass, "
                      "thunder.transforms.cudagraph.CUDAGraphTransform.generate_fused_trace"),
    ("caller-frame check", "thunder.torch.copy_"),
    ("constructor bypass", "thunder.executors.data_dependent_partition.Node"),
    ("constructor bypass", "thunder.executors.utils.Region"),
    ("function copy", "thunder.core.jit_ext._general_jit_lookaside_map (keyed by function identity)"),
)
"""lightning-thunder 0.2.6. A new reliance on the shape of Thunder's code belongs in the table and here, with a
pinning test below."""


def test_the_tables_are_pinned():
    assert tuple(p.where for p in _thunder.PRIVATE_NAMES) == EXPECTED_PRIVATE_NAMES
    assert tuple(f"{s.on}.{s.name}" for s in _thunder.STASHES) == EXPECTED_STASHES
    assert tuple((t.kind.value, t.relies_on) for t in reliances.RELIANCES) == EXPECTED_RELIANCES


@pytest.mark.parametrize("private", _thunder.PRIVATE_NAMES, ids=lambda p: p.where)
def test_every_private_name_is_still_there(private: _thunder.Private):
    owner = _resolve(private.owner)
    if private.kind is _thunder.Kind.MODULE:
        assert hasattr(owner, private.name), f"{private.where} is gone: Thunder changed; update host/names.py"
    elif private.kind is _thunder.Kind.METHOD:
        assert private.name in vars(owner), f"{private.where} is gone: Thunder changed; update host/names.py"
    elif private.kind is _thunder.Kind.CACHE:
        assert isinstance(vars(owner).get(private.name), functools.cached_property), private.where
    elif dataclasses.is_dataclass(owner):
        assert private.name in {f.name for f in dataclasses.fields(owner)}, private.where
    else:
        assert f"self.{private.name} =" in inspect.getsource(owner.__init__), private.where


@pytest.mark.parametrize("stash", _thunder.STASHES, ids=lambda s: s.name)
def test_stashes_take_no_name_thunder_uses(stash: _thunder.Stash):
    owner = _resolve(stash.on)
    if stash.name.startswith("_thunder_effects_"):
        assert not hasattr(owner, stash.name), f"{stash.on} now has {stash.name}: rename the stash"
    else:  # shadows the class's method on one instance, on purpose
        assert callable(getattr(owner, stash.name)), f"{stash.on}.{stash.name} is no longer a method"


def _defined_names() -> set[str]:
    """Every name thunder_ext itself defines (functions, classes, assigned names and attributes, parameters)."""
    names = {path.stem for path in PACKAGE.rglob("*.py")} | {path.name for path in PACKAGE.iterdir() if path.is_dir()}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
                names.add(node.id if isinstance(node, ast.Name) else node.attr)
    return names


def test_no_other_module_reads_private_thunder_names_or_spells_a_stash():
    own = _defined_names() | TORCH_PRIVATE
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() == "host/names.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("thunder"):
                stray += [f"{path.name}: imports {a.name}" for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if node.attr not in own:
                    stray.append(f"{path.name}:{node.lineno}: reads .{node.attr}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("_thunder_effects"):
                    stray.append(f"{path.name}:{node.lineno}: spells {node.value!r}")
    assert not stray, f"go through thunder_ext.host.names instead: {stray}"


# --- the reliances on the shape of Thunder's code, pinned -----------------------------------------------------------
def _cells(fn) -> dict[str, object]:
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__), strict=True))


def test_dispatch_wrappers_of_the_torch_function_map_close_over_their_symbols():
    """:data:`DISPATCH_CLOSURE`: each ``dispatch_to_impl`` wrapper (single-device vs DTensor) holds the symbols
    it dispatches to in the cells named, which is how their torch functions get schema effects."""
    from thunder.core.symbol import Symbol

    from thunder_ext.declare import declarations

    touch = reliances.DISPATCH_CLOSURE
    wrappers = [v for v in _thunder.TORCH_FUNCTION_MAP.get().values() if not isinstance(v, Symbol)
                and "dispatch_to_impl" in getattr(v, "__qualname__", "")]
    assert wrappers, "Thunder no longer wraps torch functions in dispatch_to_impl: update declarations"
    for wrapper in wrappers:
        assert f"{wrapper.__module__}.{wrapper.__qualname__}" == f"{touch.relies_on}.<locals>.wrapper"
        cells = _cells(wrapper)
        assert tuple(cells) == touch.detail and all(isinstance(cells[n], Symbol) for n in touch.detail)
        assert declarations._symbols_behind(wrapper) == tuple(cells[n] for n in touch.detail)


class _Recorded(Exception):
    pass


def _merge_predicate(monkeypatch: pytest.MonkeyPatch, module: str, run, stop: bool) -> object:
    """The merge predicate a fusion pass hands ``fuse_bound_symbols`` (looked up in ``module``), which is
    replaced by one that records it and stops the pass there (``stop``) or fuses nothing."""
    seen = []

    def recording(trace, merge_func):
        seen.append(merge_func)
        if stop:
            raise _Recorded
        return []

    monkeypatch.setattr(importlib.import_module(module), "fuse_bound_symbols", recording)
    with contextlib.suppress(_Recorded):
        run()
    assert len(seen) == 1, f"{module}.fuse_bound_symbols is no longer how the fusion pass partitions"
    return seen[0]


def _small_trace():
    import thunder
    import torch

    jfn = thunder.jit(lambda a: (a + 1) * 2, executors=["torch"])
    jfn(torch.ones(2))
    return thunder.last_traces(jfn)[-1]


def test_the_torch_compile_merge_predicate_closes_over_its_executor(monkeypatch: pytest.MonkeyPatch):
    """:data:`TORCH_COMPILE_MERGE_CLOSURE` (``inductor_guard.compiles_with_inductor``)."""
    from thunder.executors.torch_compile import TorchCompileExecutor, torch_compile_ex

    from thunder_ext.passes import inductor_guard

    touch = reliances.TORCH_COMPILE_MERGE_CLOSURE
    assert touch.relies_on.endswith(TorchCompileExecutor.fusion_pass.__qualname__)
    trace = _small_trace()
    merge = _merge_predicate(monkeypatch, "thunder.executors.data_dependent_partition",
                             lambda: torch_compile_ex.fusion_pass(trace), stop=True)
    assert merge.__name__ == "_should_fuse"
    assert all(_cells(merge)[n] is torch_compile_ex for n in touch.detail)
    assert inductor_guard.compiles_with_inductor(merge)


def test_the_cuda_graph_merge_predicate_closes_over_its_transform(monkeypatch: pytest.MonkeyPatch):
    """:data:`CUDAGRAPH_MERGE_CLOSURE` (``cudagraph.transform_of``)."""
    from thunder.transforms.cudagraph import CUDAGraphTransform

    from thunder_ext.passes import cudagraph

    touch = reliances.CUDAGRAPH_MERGE_CLOSURE
    assert touch.relies_on.endswith(CUDAGraphTransform.generate_fused_trace.__qualname__)
    transform = CUDAGraphTransform()
    trace = _small_trace()
    merge = _merge_predicate(monkeypatch, "thunder.transforms.cudagraph",
                             lambda: transform.generate_fused_trace(trace), stop=False)  # it holds a trace context
    assert merge.__name__ == "_should_fuse"
    assert all(_cells(merge)[n] is transform for n in touch.detail)
    assert cudagraph.transform_of(merge) is transform


def _cache_entry():
    import thunder
    import torch

    jfn = thunder.jit(lambda a, k: a * k, executors=["torch"])
    jfn(torch.ones(2), 2.0)
    return thunder.compile_stats(jfn).interpreter_cache[0]


def test_a_cache_entrys_prologue_is_the_generated_prologue_in_a_timer():
    """:data:`PROLOGUE_TIMER_CLOSURE`: the timer's cells are the ones named, and its one function cell is the
    generated prologue (no closure: ``cache_hit.guard`` rebuilds it from its code and globals)."""
    import types

    touch = reliances.PROLOGUE_TIMER_CLOSURE
    timed = _cache_entry().prologue_fn
    assert f"{timed.__module__}.{timed.__qualname__}" == touch.relies_on
    cells = _cells(timed)
    assert tuple(cells) == touch.detail
    functions = [v for v in touch.closure(timed) if isinstance(v, types.FunctionType)]
    assert functions == [cells["fn"]] and cells["fn"].__name__ == "prologue" and cells["fn"].__closure__ is None


def test_the_generated_prologue_calls_the_check_implementations_through_the_globals_named():
    """:data:`PROLOGUE_CHECK_GLOBALS`: the names ``cache_hit.guard`` swaps are bound to the pythonex
    implementations (:data:`CHECK_IMPLS`, in order), and no other global holds one."""
    touch = reliances.PROLOGUE_CHECK_GLOBALS
    pro = _cache_entry().prologue_fn.__closure__[0].cell_contents
    impls = {impl.get() for impl in _thunder.CHECK_IMPLS}
    holding = {name: value for name, value in pro.__globals__.items() if callable(value) and value in impls}
    assert holding == {name: impl.get() for name, impl in zip(touch.detail, _thunder.CHECK_IMPLS, strict=True)}


def test_unpack_inputs_sorts_with_the_global_sorted_and_jit_ext_keeps_the_builtin():
    """:data:`UNPACK_SORTED`: ``unpack_inputs`` (or a function it defines) looks ``sorted`` up in its globals, so a
    copy of them with ``sorted`` bound reaches every sort it makes; no patch puts a ``sorted`` into ``jit_ext``."""
    import thunder.core.jit_ext as jit_ext

    from thunder_ext.host import patches

    touch = reliances.UNPACK_SORTED
    codes = [jit_ext.unpack_inputs.__code__, *touch.nested_code(jit_ext.unpack_inputs)]
    assert any(set(touch.detail) <= set(code.co_names) for code in codes)
    swapped = touch.with_globals(jit_ext.unpack_inputs, {"sorted": len})
    assert swapped.__globals__["sorted"] is len and swapped.__code__ is jit_ext.unpack_inputs.__code__
    with patches.holding():
        assert "sorted" not in vars(jit_ext)


def test_the_epilogue_is_the_generated_function_under_two_decorators():
    """:data:`EPILOGUE_DECORATORS` (``cache_hit.plain_epilogue``): ``torch.no_grad`` and ``no_autocast``, both
    keeping ``__wrapped__``."""
    epilogue = _cache_entry().epilogue_fn
    chain = [epilogue]
    while hasattr(chain[-1], "__wrapped__"):
        chain.append(chain[-1].__wrapped__)
    assert len(chain) == 3 and chain[-1].__name__ == "epilogue"
    assert reliances.EPILOGUE_DECORATORS.peel(epilogue) is chain[-1]


def test_the_fusion_predicates_scanned_are_conjunctions():
    """:data:`CONJUNCTION_CODE`: each function holds one nested code object of the name, whose bytecode is
    ``return _can_fuse_node(a) and _can_fuse_node(b)`` after defining ``_can_fuse_node``."""
    import dis

    from thunder.executors.torch_compile import TorchCompileExecutor
    from thunder.transforms.cudagraph import CUDAGraphTransform

    touch = reliances.CONJUNCTION_CODE
    kept = {"LOAD_FAST", "CALL", "JUMP_IF_FALSE_OR_POP", "RETURN_VALUE"}
    for fn in (TorchCompileExecutor.fusion_pass, CUDAGraphTransform.generate_fused_trace):
        assert fn.__qualname__ in touch.relies_on
        found = [c for c in fn.__code__.co_consts if hasattr(c, "co_code") and c.co_name in touch.detail]
        assert len(found) == 1, f"{fn.__qualname__} no longer defines {touch.detail}"
        ops = [(i.opname, i.argval) for i in dis.get_instructions(found[0])]
        body = ops[ops.index(("STORE_FAST", "_can_fuse_node")) + 1:]
        assert [(op, None if op.startswith("JUMP") else arg) for op, arg in body if op in kept] == [
            ("LOAD_FAST", "_can_fuse_node"), ("LOAD_FAST", "a"), ("CALL", 1), ("JUMP_IF_FALSE_OR_POP", None),
            ("LOAD_FAST", "_can_fuse_node"), ("LOAD_FAST", "b"), ("CALL", 1), ("RETURN_VALUE", None)]


def test_the_copy_frame_is_ltorch_copy():
    """:data:`COPY_FRAME`: ``ltorch.copy_``'s function calls ``_copy_`` itself, so the frame check sees it
    (an in-place op's ``_copy_`` call does not)."""
    import thunder.torch as ltorch
    import torch

    from thunder_ext.eager import eager_checks

    touch = reliances.COPY_FRAME
    code = touch.peel(ltorch.copy_.meta).__code__
    assert code is eager_checks._COPY_CODE and code.co_name == "copy_" and set(touch.detail) <= set(code.co_names)
    ints, floats = torch.ones(2, dtype=torch.int64), torch.full((2,), 2.5)
    thunder_ext.jit(lambda x, y: x.copy_(y), executors=["torch"])(ints, floats)  # seen as copy_: converts
    assert ints.tolist() == [2, 2]
    with pytest.raises(RuntimeError, match="can't be cast"):  # not copy_: eager's result-type rule
        thunder_ext.jit(lambda x, y: x.add_(y), executors=["torch"])(ints, floats)


def _fields_init_sets(cls: type) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    targets = [t for n in ast.walk(tree) for t in (n.targets if isinstance(n, ast.Assign) else
                                                   [n.target] if isinstance(n, ast.AnnAssign) else [])]
    return {t.attr for t in targets if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "self"}


@pytest.mark.parametrize("touch", [reliances.NODE_BYPASS, reliances.REGION_BYPASS], ids=lambda t: t.relies_on)
def test_a_bypassed_constructor_sets_only_the_fields_set_instead(touch: reliances.Touch):
    """:data:`NODE_BYPASS`, :data:`REGION_BYPASS`: ``__init__`` sets exactly the fields the bypass sets (a new
    one would be missing from the instances built without it)."""
    cls = _resolve(touch.relies_on)
    assert _fields_init_sets(cls) == set(touch.detail), f"{touch.relies_on}.__init__ changed: update the bypass"
    assert not hasattr(cls, "__slots__") and type(touch.new(cls)) is cls


def test_node_bypass_builds_what_the_constructor_builds():
    from thunder.executors.data_dependent_partition import Node

    from thunder_ext.host import fast_fusion

    bsym = _small_trace().bound_symbols[-1]
    made, built = Node(0, [bsym], [0], 0, 0, False), fast_fusion._node(bsym)
    assert vars(made).keys() == vars(built).keys() == set(reliances.NODE_BYPASS.detail)
    assert {k: v for k, v in vars(made).items() if k not in ("parents", "children")} == {
        k: v for k, v in vars(built).items() if k not in ("parents", "children")}


def test_the_batch_norm_forward_copy_is_not_looked_aside():
    """:data:`LOOKASIDE_COPY`: the interpreter finds lookasides by identity (a dict lookup), so the copy of
    ``_BatchNorm.forward`` is interpreted while the original is looked aside."""
    import thunder.core.jit_ext as jit_ext

    from thunder_ext.eager import batch_norm

    assert "_general_jit_lookaside_map.get(fn, None)" in inspect.getsource(jit_ext.general_jit_lookaside)
    copy = batch_norm._TORCH_FORWARD
    assert copy is not batch_norm._FORWARD and copy.__code__ is batch_norm._FORWARD.__code__
    assert batch_norm._FORWARD in batch_norm.lookasides() and copy not in batch_norm.lookasides()


# --- the users columns --------------------------------------------------------------------------------------------
def _module_of(path: Path) -> str:
    return path.relative_to(PACKAGE).with_suffix("").as_posix()


def _python_names() -> dict[int, str]:
    """id(entry) -> the name ``host/names`` or ``host/reliances`` binds it (or the tuple holding it) to."""
    named: dict[int, str] = {}
    for name, value in {**vars(_thunder), **vars(reliances)}.items():
        if isinstance(value, tuple) and name not in {"PRIVATE_NAMES", "STASHES", "RELIANCES", "__all__"}:
            named.update((id(v), name) for v in value if isinstance(v, _thunder.Private))
        elif isinstance(value, (_thunder.Private, _thunder.Stash, reliances.Touch)):
            named[id(value)] = name
    return named


@functools.cache
def _spellers() -> dict[str, frozenset[str]]:
    """Python name of an entry -> the thunder_ext modules that spell it (an import, a name, an attribute)."""
    wanted = set(_python_names().values())
    found: dict[str, set[str]] = {name: set() for name in wanted}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_of(path)
        if module in ("host/names", "host/reliances"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            spelled = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else [
                node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None]
            for name in spelled:
                if name in found:
                    found[name].add(module)
    return {name: frozenset(modules) for name, modules in found.items()}


def _entry_id(entry: object) -> str:
    return getattr(entry, "where", None) or getattr(entry, "relies_on", None) or f"{entry.on}.{entry.name}"


@pytest.mark.parametrize("entry", [*_thunder.PRIVATE_NAMES, *_thunder.STASHES], ids=_entry_id)
def test_the_users_column_is_the_modules_that_use_the_entry(entry):
    name = _python_names()[id(entry)]
    assert set(entry.users) == _spellers()[name], (
        f"host/names.{name}.users says {sorted(entry.users)}; the modules using it are {sorted(_spellers()[name])}")


@pytest.mark.parametrize("touch", reliances.RELIANCES, ids=lambda t: f"{t.kind.value}: {t.relies_on}")
def test_the_users_of_each_reliance_exist_and_use_it(touch: reliances.Touch):
    name = _python_names()[id(touch)]
    for user in touch.users:
        module, _, function = user.partition(".")
        source = (PACKAGE / f"{module}.py").read_text()
        assert re.search(rf"^(def {function}\(|{function} = )", source, re.M), f"{user} is gone: update host/names"
    modules = {u.partition(".")[0] for u in touch.users}
    assert modules == _spellers()[name], f"host/names.{name}.users: the modules using it are {_spellers()[name]}"
