"""Shared test configuration: which tests run by default, Hypothesis profiles, an isolated-registry fixture.

**Default run** (the README's ``python -m pytest -q -n auto``: pytest-xdist, one worker per core; modules that
share an expensive module-scoped fixture carry an ``xdist_group`` mark): fast and deterministic. Tests marked
``slow`` (exhaustive sweeps, long fuzz runs, the full example scripts) are deselected unless ``EFFECTS_SLOW=1`` is
set (``.ci/run`` sets it, so CI runs the README's command and still checks everything) or ``-m`` selects by marker
explicitly (``-m slow``, ``-m cuda``). A new test that takes more than a few seconds on two cores belongs behind
``slow``.

**Hypothesis profiles**, selected with ``HYPOTHESIS_PROFILE``: ``default`` (derandomized: the same examples on
every run and machine, no example database), ``ci`` (the same under ``CI``), ``explore`` (random examples, for
finding new bugs locally), ``nightly`` (2,000 examples, random).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

import effects

SLOW = bool(os.environ.get("EFFECTS_SLOW"))
"""Run the tests marked ``slow`` too (set by ``.ci/run``)."""

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # under ``-n``: the workers share the cores instead of each
    # taking all of them for its kernels (oversubscribed threads spin and wait on each other)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

_QUIET = [HealthCheck.too_slow]
settings.register_profile("default", max_examples=60, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_QUIET)
settings.register_profile("ci", parent=settings.get_profile("default"))
settings.register_profile("explore", max_examples=100, deadline=None, suppress_health_check=_QUIET)
settings.register_profile("nightly", max_examples=2000, deadline=None, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))


@pytest.fixture
def registry() -> effects.Registry:
    """A fresh, isolated registry (schema defaults, opaque fallback)."""
    return effects.Registry()


@pytest.fixture(autouse=True)
def _torch_modes_unchanged():
    """Fail any test that starts or ends with torch's process-wide modes changed (grad mode, the default dtype):
    such a leak makes later tests depend on order (``torch.set_grad_enabled(False)`` *constructed* in a
    ``parametrize`` list disables grad for the whole process at collection)."""
    modes = (torch.is_grad_enabled, torch.get_default_dtype, torch.is_inference_mode_enabled)
    expected = (True, torch.float32, False)
    assert tuple(m() for m in modes) == expected, "an earlier test or the collection left torch's modes changed"
    yield
    assert tuple(m() for m in modes) == expected, "this test left torch's modes changed (grad mode or dtype)"


@pytest.fixture(autouse=True)
def _default_registry_unchanged():
    """Fail any test that leaks declarations into the process-wide registry."""
    before = effects.default_registry().snapshot()
    yield
    assert effects.default_registry().snapshot() == before, "test leaked declarations into default_registry()"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Declare Thunder's symbols (``import thunder_ext``) before any test runs, so that the leak check's snapshots
    of the default registry all include them — in every process that runs tests, not in pytest-xdist's controller,
    which only hands tests out (its import took ~7 s before the workers started)."""
    if session.config.pluginmanager.hasplugin("dsession"):
        return
    try:
        import thunder_ext  # noqa: F401
    except ImportError:  # lightning-thunder not installed: the thunder_ext tests skip themselves
        pass


def pytest_report_header(config: pytest.Config) -> str:
    if SLOW or config.option.markexpr:
        return "thunder-effects: slow tests included" if SLOW else "thunder-effects: selection by -m"
    return "thunder-effects: slow tests deselected (EFFECTS_SLOW=1 runs them)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``slow`` tests unless ``EFFECTS_SLOW`` is set or ``-m`` was given, else run them first (a stable
    sort: pytest-randomly's shuffle, which comes before, stays within each part) so that pytest-xdist hands the
    long tests out while the short ones can still even out the workers' ends; skip ``cuda`` tests without a CUDA
    device (with the reason shown by ``-ra``)."""
    if not SLOW and not config.option.markexpr:
        slow = [item for item in items if item.get_closest_marker("slow") is not None]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]
    else:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
