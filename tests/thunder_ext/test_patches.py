"""The Thunder patches: identities and signatures pinned (fail loudly when Thunder changes), reversible."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("thunder")

import thunder_ext  # noqa: E402,F401
from thunder_ext import compilation  # noqa: E402
from thunder_ext.host import patches as _patches, state  # noqa: E402
from thunder_signatures import EXPECTED_PARAMETERS  # noqa: E402


@pytest.mark.parametrize("patch", [p for p in _patches.PATCHES if not isinstance(p.owner, dict)],
                         ids=lambda p: p.where)
def test_target_is_the_expected_thunder_function(patch):
    assert not _patches.applied()
    assert patch.current() is patch.original, (
        f"{patch.where} is no longer the function thunder_ext patches; Thunder changed: update _patches.py"
    )


TABLES = sorted({p.table for p in _patches.PATCHES if isinstance(p.owner, dict)})
"""The Thunder tables the patches add, replace or remove entries in (one test each: the grad table alone has
hundreds of entries)."""


@pytest.mark.parametrize("table", TABLES)
def test_table_entries_are_the_expected_thunder_entries(table):
    assert not _patches.applied()
    changed = [p.where for p in _patches.PATCHES
               if isinstance(p.owner, dict) and p.table == table and p.current() is not p.original]
    assert changed == [], f"Thunder changed these entries thunder_ext patches: update _patches.py ({changed[:10]})"


@pytest.mark.parametrize("patch", [p for p in _patches.PATCHES if not isinstance(p.owner, dict)
                                   and p.name not in compilation.MODULE_ATTRIBUTES], ids=lambda p: p.where)
def test_signature_is_pinned(patch):
    params = tuple(inspect.signature(patch.original).parameters)
    assert params == EXPECTED_PARAMETERS[patch.name], f"{patch.where} changed its parameters"
    replacement = tuple(inspect.signature(patch.replacement).parameters)
    assert replacement == params, f"replacement of {patch.where} must take the same parameters"


@pytest.mark.parametrize("name", sorted(compilation.STAND_INS))
def test_every_stand_in_takes_the_original_then_its_parameters(name):
    original, stand_in = compilation.STAND_INS[name]
    assert tuple(inspect.signature(stand_in).parameters) == ("original", *EXPECTED_PARAMETERS[name])
    assert all(p.original in (original, _patches.ABSENT) for p in _patches.PATCHES if p.name == name)


def test_the_guard_calls_the_original_unless_the_pipeline_is_active():
    calls = []

    def original(x):
        calls.append(("original", x))
        return x

    def stand_in(orig, x):
        calls.append(("stand-in", x))
        return orig(x) + 1

    replacement = _patches.guarded(original, stand_in)
    assert not state.active() and replacement(1) == 1
    state.set_global(True)
    try:
        assert replacement(2) == 3
    finally:
        state.set_global(False)
    assert calls == [("original", 1), ("stand-in", 2), ("original", 2)]


def test_apply_and_restore_are_reference_counted():
    with _patches.holding():
        with _patches.holding():
            assert all(p.current() is p.replacement for p in _patches.PATCHES)
        assert _patches.applied()
    assert not _patches.applied()
    assert all(p.current() is p.original for p in _patches.PATCHES)


def test_apply_refuses_a_foreign_patch(monkeypatch):
    patch = _patches.PATCHES[0]
    monkeypatch.setattr(patch.owner, patch.name, lambda *a: None)
    with pytest.raises(RuntimeError, match="cannot patch Thunder"):
        _patches.apply()
    assert not _patches.applied()


def test_new_table_entries_are_added_and_removed():
    entries = [p for p in _patches.PATCHES if p.original is _patches.ABSENT]
    assert entries, "thunder_ext.declare.opaque_torch registers lookasides and methods through _patches"
    with _patches.holding():
        assert all(p.current() is p.replacement for p in entries)
    assert all(p.current() is _patches.ABSENT for p in entries)


def test_apply_refuses_an_entry_someone_else_added():
    entry = next(p for p in _patches.PATCHES if p.original is _patches.ABSENT and isinstance(p.owner, dict))
    entry.owner[entry.name] = object()
    try:
        with pytest.raises(RuntimeError, match="cannot patch Thunder"):
            _patches.apply()
    finally:
        del entry.owner[entry.name]
    assert not _patches.applied()


def test_the_patches_put_every_step_of_the_compilation_in_place_and_nothing_else():
    """:mod:`thunder_ext.compilation` says what replaces what; the patch module only says where: every patched
    function is a stand-in of the compilation's table, and every stand-in is patched somewhere."""
    functions = {p.name for p in _patches.PATCHES if not isinstance(p.owner, dict)}
    assert functions == set(compilation.STAND_INS) | set(compilation.MODULE_ATTRIBUTES)
