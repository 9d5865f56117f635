"""The tables of private Thunder names read and of attributes attached to Thunder objects
(:mod:`thunder_ext.host.names`): pinned against the installed Thunder, and the only place such names appear."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
from pathlib import Path

import pytest

pytest.importorskip("thunder")

import thunder_ext  # noqa: E402,F401
from thunder_ext.host import names as _thunder  # noqa: E402

EXPECTED_PRIVATE_NAMES = (
    "thunder.torch._torch_to_thunder_function_map",
    "thunder.torch._syms_returning_views",
    "thunder.torch._syms_that_may_return_views",
    "thunder.torch.langctx._method_name_to_fn_map",
    "thunder.torch.langctx._property_name_to_fn_map",
    "thunder.core.jit_ext._general_jit_lookaside_map",
    "thunder.core.transforms._grad_fn_map",
    "thunder.torch._copy_",
    "thunder.core.jit_ext._infer_name_postfix_from_provenance",
    "thunder.core.interpreter._interpret_call",
    "thunder.core.interpreter.InterpreterRuntimeCtx._known_wrappers",
    "thunder.core.jit_ext.JitCtx._additional_outputs",
    "thunder.core.jit_ext.JitCtx._constraints",
    "thunder.core.interpreter.InterpreterRuntimeCtx._proxied_values",
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
                           "_len_torch_function_stack", "_GLOBAL_DEVICE_CONTEXT", "_InferenceMode",
                           "_group_tensors_by_device_and_dtype"})
"""torch's operator API as ``torch.library`` itself uses it (schemas of overloads, overload resolution), and what
``torch.get_default_device`` reads (the function-mode stack depth, the global device context:
``fast_call.default_device``), the guard ``torch.inference_mode`` enters (``interpreter_state``'s lookaside), and
the C grouping ``torch.nn.utils``' gradient clipping calls (``optimizers``' lookaside)."""

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


def test_the_tables_are_pinned():
    assert tuple(p.where for p in _thunder.PRIVATE_NAMES) == EXPECTED_PRIVATE_NAMES
    assert tuple(f"{s.on}.{s.name}" for s in _thunder.STASHES) == EXPECTED_STASHES


@pytest.mark.parametrize("private", _thunder.PRIVATE_NAMES, ids=lambda p: p.where)
def test_every_private_name_is_still_there(private: _thunder.Private):
    owner = _resolve(private.owner)
    if private.kind is _thunder.Kind.MODULE:
        assert hasattr(owner, private.name), f"{private.where} is gone: Thunder changed; update host/names.py"
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


def test_dispatch_wrappers_of_the_torch_function_map_close_over_their_symbols():
    """The closure read that stays in ``declarations``: each ``dispatch_to_impl`` wrapper (single-device vs
    DTensor) holds the symbols it dispatches to, which is how their torch functions get schema effects."""
    from thunder.core.symbol import Symbol

    from thunder_ext.declare import declarations

    wrappers = [v for v in _thunder.TORCH_FUNCTION_MAP.get().values() if not isinstance(v, Symbol)
                and "dispatch_to_impl" in getattr(v, "__qualname__", "")]
    assert wrappers, "Thunder no longer wraps torch functions in dispatch_to_impl: update declarations"
    assert all(declarations._symbols_behind(v) for v in wrappers)
