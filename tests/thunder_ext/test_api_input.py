"""The executor-author API refuses bad input with a typed error that names the offending argument, before it
registers anything; and the examples in its docstrings run (doctests)."""

from __future__ import annotations

import doctest
import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("thunder")

import thunder_ext  # noqa: E402,F401  (applies the compat shim before thunder is imported)

import thunder.torch as ltorch  # noqa: E402
from thunder.core.proxies import TensorProxy  # noqa: E402

import effects  # noqa: E402
from effects import IO, InvalidArgumentError, InvalidDeclaration  # noqa: E402
from thunder_ext.declare import declaration_checks, honesty, plugin  # noqa: E402
from thunder_ext.declare.honesty import CheckEffects, check_executor  # noqa: E402
from thunder_ext.declare.plugin import OperatorExecutor, declare_effects, register_implementation, register_operator  # noqa: E402

_names = (f"api_input_test_{i}" for i in itertools.count())


def copy_meta(src: TensorProxy, dst: TensorProxy) -> TensorProxy:
    return TensorProxy(like=dst)


def copy_impl(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    return dst.copy_(src)


@pytest.fixture
def executor(registry: effects.Registry) -> OperatorExecutor:
    """An executor with one operator, ``my_copy_(src, dst)``, declaring into an isolated registry."""
    ex = OperatorExecutor(next(_names), registry=registry)
    ex.register_operator("my_copy_", meta=copy_meta, fn=copy_impl)
    return ex


Case = tuple[type[Exception], str, Callable[[OperatorExecutor], Any]]

DECLARATION_CASES: dict[str, Case] = {
    # the cases
    "writes given as one string": (InvalidArgumentError, "writes=",
                                   lambda ex: declare_effects(ex, "my_copy_", writes="dst", registry=ex.registry)),
    "writes given as a one-letter string": (
        InvalidArgumentError, "writes=",
        lambda ex: declare_effects(ex, ex.register_operator("one", meta=lambda d: d, fn=lambda d: d.zero_()),
                                   writes="d", registry=ex.registry)),
    "schema output alias set naming no input": (
        InvalidDeclaration, "alias set 'b'",
        lambda ex: declare_effects(ex, "my_copy_", "my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(b)",
                                   registry=ex.registry)),
    "schema named after another operator": (
        InvalidDeclaration, "effects= is the schema of 'other_copy_'",
        lambda ex: declare_effects(ex, "my_copy_", "other_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)",
                                   registry=ex.registry)),
    "resource given as a string": (InvalidArgumentError, "resources=",
                                   lambda ex: declare_effects(ex, "my_copy_", resources=["io"], registry=ex.registry)),
    # found on the way
    "resource given without a list": (
        InvalidArgumentError, "resources=",
        lambda ex: declare_effects(ex, "my_copy_", resources=IO, registry=ex.registry)),
    "reads given as one position": (InvalidArgumentError, "reads=",
                                    lambda ex: declare_effects(ex, "my_copy_", reads=0, registry=ex.registry)),
    "one alias given without a list": (
        InvalidArgumentError, "aliases=",
        lambda ex: declare_effects(ex, "my_copy_", writes=["dst"], aliases=(0, "dst"), registry=ex.registry)),
    "alias that is not a pair": (
        InvalidArgumentError, "aliases=",
        lambda ex: declare_effects(ex, "my_copy_", writes=["dst"], aliases=["dst"], registry=ex.registry)),
    "mapping with a list given as one string": (
        InvalidArgumentError, "effects['writes']=",
        lambda ex: declare_effects(ex, "my_copy_", {"writes": "dst"}, registry=ex.registry)),
    "misspelled operand-list keyword": (
        InvalidArgumentError, "'write'",
        lambda ex: declare_effects(ex, "my_copy_", write=["dst"], registry=ex.registry)),
    "registry that is not a Registry": (
        InvalidArgumentError, "registry=",
        lambda ex: declare_effects(ex, "my_copy_", writes=["dst"], registry=effects.default_registry)),
    "executor that is not an Executor": (
        InvalidArgumentError, "executor=",
        lambda ex: declare_effects(ex.name, "my_copy_", writes=["dst"], registry=ex.registry)),
    "operator name that is not an identifier": (
        InvalidArgumentError, "name=",
        lambda ex: register_operator(ex, "my op", meta=copy_meta, fn=copy_impl, registry=ex.registry)),
    "register_operator with a list given as one string": (
        InvalidArgumentError, "writes=",
        lambda ex: ex.register_operator("copy2_", meta=copy_meta, fn=copy_impl, writes="dst")),
    "implementation op that is not a Symbol": (
        InvalidArgumentError, "op=",
        lambda ex: register_implementation(ex, ltorch.neg, torch.neg, reads=[0], registry=ex.registry)),
    "OperatorExecutor registry that is not a Registry": (
        InvalidArgumentError, "registry=", lambda ex: OperatorExecutor(next(_names), registry={})),
    "check_executor samples that are not a mapping": (
        InvalidArgumentError, "samples=",
        lambda ex: check_executor(ex, [(torch.ones(2), torch.ones(2))], registry=ex.registry)),
    "check_executor sample given without its list": (
        InvalidArgumentError, "samples[my_copy_]",
        lambda ex: check_executor(ex, {"my_copy_": (torch.ones(2), torch.ones(2))}, registry=ex.registry)),
    "CheckEffects registry that is not a Registry": (
        InvalidArgumentError, "registry=", lambda ex: CheckEffects(registry="default")),
}


@pytest.mark.parametrize("case", DECLARATION_CASES, ids=list(DECLARATION_CASES))
def test_bad_input_raises_a_typed_error_naming_the_argument(case: str, executor: OperatorExecutor) -> None:
    error, names, call = DECLARATION_CASES[case]
    opmap_before = dict(executor.opmap)
    with pytest.raises(error) as raised:
        call(executor)
    assert names in str(raised.value), f"the message does not name {names}: {raised.value}"
    assert executor.registry.snapshot() == {}, "a refused declaration registered something"
    assert executor.opmap.keys() <= opmap_before.keys() | {"one"}, "a refused operator stayed registered"


def test_wrong_kinds_are_type_errors_and_bad_declarations_value_errors() -> None:
    assert issubclass(InvalidArgumentError, TypeError) and issubclass(InvalidArgumentError, effects.EffectError)
    assert issubclass(InvalidDeclaration, ValueError)


def test_the_checks_do_not_reject_good_input(executor: OperatorExecutor) -> None:
    declared = declare_effects(executor, "my_copy_", "my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)",
                               resources=[IO, effects.ResourceEffect(effects.rng("cpu"), ordered=False)],
                               registry=executor.registry)
    assert str(declared.effects) == "read(0:src), read-write(1:dst), out0 aliases 1, io, rng[cpu] (unordered)"
    may = declare_effects(executor, executor.register_operator("view_or_copy", meta=lambda a: a, fn=torch.clone),
                          "view_or_copy(Tensor(a) a) -> Tensor(b|a)", registry=executor.registry)
    assert str(may.effects) == "read(0:a), out0 may alias 0"


@pytest.mark.parametrize("module", [plugin, declaration_checks, honesty], ids=lambda m: m.__name__)
def test_docstring_examples_run(module: Any) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("module", [plugin, declaration_checks, honesty], ids=lambda m: m.__name__)
def test_every_public_name_has_a_docstring_with_an_example(module: Any) -> None:
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if getattr(value, "__module__", None) != module.__name__:
            continue  # re-exported (EffectSpec)
        doc = value.__doc__ or ""
        if ">>>" not in doc:
            missing.append(name)
        if isinstance(value, type):
            missing += [f"{name}.{attr}" for attr, member in vars(value).items()
                        if callable(member) and not attr.startswith("_") and not (member.__doc__ or "").strip()]
    assert not missing, f"public names without a docstring example: {missing}"
