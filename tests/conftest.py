"""Shared test configuration: hypothesis profiles and an isolated-registry fixture.

Profiles: ``derandomized`` (the default: the same examples on every run, so the test command never fails because of
random example choice), and the opt-in random ones ``explore`` (100 fresh examples per test) and ``nightly`` (2000).
Select with ``HYPOTHESIS_PROFILE=explore``; ``python -m effects.fuzz`` explores at scale.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import effects

try:  # declare Thunder's symbols before the leak check snapshots the default registry
    import thunder_ext  # noqa: F401
except ImportError:  # lightning-thunder not installed: the thunder_ext tests skip themselves
    pass

settings.register_profile("derandomized", max_examples=60, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("nightly", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "derandomized"))


@pytest.fixture
def registry() -> effects.Registry:
    """A fresh, isolated registry (schema defaults, opaque fallback)."""
    return effects.Registry()


@pytest.fixture(autouse=True)
def _default_registry_unchanged():
    """Fail any test that leaks declarations into the process-wide registry."""
    before = effects.default_registry().snapshot()
    yield
    assert effects.default_registry().snapshot() == before, "test leaked declarations into default_registry()"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``cuda`` when no CUDA device is available (CI), with the reason shown by ``-ra``."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
