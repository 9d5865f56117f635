"""``d.keys()``, ``d.values()``, ``d.items()`` inside a jitted function
(:mod:`thunder_ext.python_state.mapping_views`): every operation of eager's views with eager's answer, tensor values
as the trace's values, the dict's key set guarded — against eager, over several calls."""

from __future__ import annotations

import collections
import collections.abc as abc
from typing import Any

import pytest
import torch

pytest.importorskip("thunder")

import thunder  # noqa: E402
import thunder_ext  # noqa: E402


def summarize(x: torch.Tensor, d: dict) -> tuple[torch.Tensor, tuple[Any, ...]]:
    keys, values, items = d.keys(), d.values(), d.items()
    total = x * 0
    for v in values:
        total = total + v * x
    last_key, last_value = next(reversed(items))
    facts = (len(keys), len(values), len(items), keys == {"a", "b"}, sorted(keys & {"a", "z"}),
             sorted(keys | {"z"}), sorted(keys - {"a"}), sorted(keys ^ {"a", "z"}), keys.isdisjoint({"z"}),
             "a" in keys, ("a", d["a"]) in items, ("z", x) in items,
             isinstance(keys, abc.KeysView), isinstance(values, abc.ValuesView), isinstance(items, abc.ItemsView),
             list(reversed(keys)), sorted(keys), set(keys) == set(d), keys.mapping["a"] is d["a"], last_key)
    return total + last_value + sum(len(k) for k, _ in items), facts


@pytest.mark.parametrize("mapping", [dict, collections.OrderedDict])
def test_views_answer_as_eagers(mapping):
    """Lengths, membership, set operations and comparisons, ``isinstance``, ``reversed``, ``mapping`` and the
    native iteration of an opaque call (``sorted``, ``set``); tensor values summed in the trace. One compilation."""
    jitted = thunder_ext.jit(summarize, executors=["torch"])
    for i in range(2):
        d = mapping((name, torch.full((2,), float(i + k))) for k, name in enumerate("ab"))
        x = torch.arange(2.0) + i
        got, expected = jitted(x, d), summarize(x, d)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
    assert thunder.cache_misses(jitted) == 1


def total(x: torch.Tensor, d: dict) -> torch.Tensor:
    for v in d.values():
        x = x + v
    return x


def test_iterating_a_dict_guards_its_key_set():
    """A dict with other keys than the traced one compiles anew, as asking for its keys (``d.keys()``, which
    Thunder's iteration went through) always did."""
    jitted = thunder_ext.jit(total, executors=["torch"])
    for names in ["ab", "ab", "abc"]:
        d = {name: torch.full((2,), float(k)) for k, name in enumerate(names)}
        torch.testing.assert_close(jitted(torch.ones(2), d), total(torch.ones(2), d))
    assert thunder.cache_misses(jitted) == 2


class Record(collections.OrderedDict):
    """``transformers.ModelOutput``'s pattern: ``__getitem__`` reads through the views."""

    def __getitem__(self, key: Any) -> Any:
        return dict(self.items())[key] if isinstance(key, str) else list(self.values())[key]


def record(x: torch.Tensor) -> torch.Tensor:
    out = Record()
    out["hidden"] = x * 2
    return out[0] + out["hidden"]


def test_views_of_a_subclass_read_the_dict_not_its_overrides():
    """A native view reads the dict's storage, never a subclass's ``__getitem__`` (which here reads the view)."""
    jitted = thunder_ext.jit(record, executors=["torch"])
    for i in range(2):
        x = torch.arange(2.0) + i
        torch.testing.assert_close(jitted(x), record(x))
    assert thunder.cache_misses(jitted) == 1
