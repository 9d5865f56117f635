"""thunder_ext.python_state.named_members: ``named_parameters``/``named_buffers`` (and ``parameters``/``buffers``) in
a jitted function yield eager's members in eager's order, whatever the string hash (Thunder's set order differed
from eager's and from one process to the next), and cache hits read the call's members.

Every case compares the jitted function's outputs with eager's position by position, and once in a
subprocess of a fixed ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("thunder")

import torch

import thunder_ext


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)),
                              torch.nn.Linear(3, 3), torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    net[2].weight = net[1].weight  # tied: named_parameters yields it once, remove_duplicate=False twice
    return net


def positional(fn, net, x):
    """``fn(net, x)`` jitted and eager: each position's tensor the same."""
    expected = fn(net, x)
    got = thunder_ext.jit(fn)(net, x)
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(a, b, msg=f"position {i}")


def weighted_parameters(net, x):
    return [x.sum() * i + p.sum() for i, p in enumerate(net.parameters())]


def named(net, x):
    return [x.sum() * i + p.sum() + len(n) for i, (n, p) in enumerate(net.named_parameters(prefix="root"))]


def buffers(net, x):
    return [x.sum() * i + b.float().sum() for i, (_, b) in enumerate(net.named_buffers())]


def not_recursive(net, x):
    return [x.sum() * i + p.sum() for i, p in enumerate(net[1].parameters(recurse=False))]


def with_duplicates(net, x):
    return [x.sum() * i + p.sum() for i, (_, p) in enumerate(net.named_parameters(remove_duplicate=False))]


def paired(net, x):
    """A position-dependent pairing, as an EMA or a gradient list zipped with the parameters is."""
    scales = [float(i + 1) for i in range(len(list(net.parameters())))]
    return [p.sum() * s + x.sum() for p, s in zip(net.parameters(), scales, strict=True)]


@pytest.mark.parametrize("fn", [weighted_parameters, named, buffers, not_recursive, with_duplicates, paired])
def test_members_come_in_eagers_order(fn):
    positional(fn, model(), torch.randn(2, 3))


def test_a_cache_hit_reads_the_calls_members_in_order():
    net = model()
    jfn = thunder_ext.jit(weighted_parameters)
    x = torch.randn(2, 3)
    jfn(net, x)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(2)
    for a, b in zip(jfn(net, x), weighted_parameters(net, x), strict=True):
        torch.testing.assert_close(a, b)


class OwnWalk(torch.nn.Module):
    """A module whose ``named_modules`` hides a child: the names eager yields are not paths of ``_modules``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(2, 2)
        self.scale = torch.nn.Parameter(torch.tensor(3.0))

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        yield prefix, self


def test_a_module_of_its_own_named_modules_yields_what_eager_yields():
    net = OwnWalk()
    positional(lambda m, x: [x * i + p.sum() for i, p in enumerate(m.parameters())], net, torch.ones(1))


def test_gradients_flow_to_every_parameter_in_order():
    net, eager = model(), model()
    x = torch.randn(4, 3)

    def loss(m, x):
        return sum((i + 1) * p.square().sum() for i, p in enumerate(m.parameters())) + m(x).sum()

    thunder_ext.jit(loss)(net, x).backward()
    loss(eager, x).backward()
    for (name, p), q in zip(net.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


_SCRIPT = textwrap.dedent("""
    import torch, thunder_ext
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(5)])
    def f(x):
        return [x * i + p.sum() for i, p in enumerate(net.parameters())]
    x = torch.ones(1)
    print(all(torch.equal(a, b) for a, b in zip(thunder_ext.jit(f)(x), f(x), strict=True)))
""")


def test_the_order_does_not_depend_on_the_string_hash():
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the in-process cases run under whatever hash this process has
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True", out.stdout + out.stderr


def test_thunder_still_looks_these_methods_aside_and_ours_replace_its_entries():
    """If Thunder drops (or renames) its lookasides for these, this says so: ours would then be new entries."""
    from thunder.core.jit_ext import _general_jit_lookaside_map

    from thunder_ext.python_state import named_members

    assert set(named_members.lookasides()) == {torch.nn.Module.named_parameters, torch.nn.Module.named_buffers}
    assert set(named_members.lookasides()) <= set(_general_jit_lookaside_map)
