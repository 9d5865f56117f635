"""``thunder_ext.jit`` checks its arguments when it is called (:mod:`thunder_ext.options`): each bad argument is a
``JitArgumentError`` naming that argument, raised before anything compiles; every valid spelling still works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("thunder")

import thunder  # noqa: E402
import torch  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext import JitArgumentError  # noqa: E402
from thunder_ext.options import THUNDER_COMPILE_OPTIONS  # noqa: E402


def add_one(a):
    return a.add_(1)


BAD = {
    "fn": ((42,), {}, r"jit\(fn\).*int 42"),
    "misspelled keyword": ((add_one,), {"fusion_typ": "dataflow"}, r"fusion_typ=.*did you mean 'fusion_type'"),
    "unknown keyword": ((add_one,), {"zzz": 1}, r"zzz=.*unknown keyword.*compile_options="),
    "verify": ((add_one,), {"verify": "no"}, r"verify=.*True or False.*'no'"),
    "reinplace": ((add_one,), {"reinplace": 1}, r"reinplace=.*True or False"),
    "certify_collectives": ((add_one,), {"certify_collectives": None}, r"certify_collectives=.*True or False"),
    "skip_inplace_alias_updates": ((add_one,), {"skip_inplace_alias_updates": "yes"},
                                   r"skip_inplace_alias_updates=.*True or False"),
    "disable_torch_autograd": ((add_one,), {"disable_torch_autograd": "no"}, r"disable_torch_autograd=.*True or"),
    "fusion_type": ((add_one,), {"fusion_type": "nonsense"}, r"fusion_type='nonsense'.*'dataflow', 'consecutive'"),
    "executors as a string": ((add_one,), {"executors": "torch"}, r"executors='torch'.*executors=\['torch'\]"),
    "unknown executor": ((add_one,), {"executors": ["torchcompiled"]}, r"executors=.*'torchcompiled'.*did you mean "
                                                                        r"'torchcompile"),
    "executor of another type": ((add_one,), {"executors": [3]}, r"executors=.*each item must be an executor"),
    "transforms not a list": ((add_one,), {"transforms": 42}, r"transforms=.*expected a list.*int 42"),
    "a transform of another type": ((add_one,), {"transforms": [42]}, r"transforms=.*each item must be a thunder "
                                                                       r"transform"),
    "debug_options": ((add_one,), {"debug_options": 3}, r"debug_options=.*thunder.DebugOptions"),
    "thunder_ext's compile option": ((add_one,), {"thunder_effects_cudagraph_share_outputs": "yes"},
                                     r"thunder_effects_cudagraph_share_outputs=.*True or False"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_argument_is_refused_at_jit_time_naming_it(case):
    args, kwargs, message = BAD[case]
    with pytest.raises(JitArgumentError, match=message) as raised:
        thunder_ext.jit(*args, **kwargs)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)


@pytest.mark.parametrize("kwargs", [
    {}, {"executors": ["torch"]}, {"executors": ("torchcompile",), "fusion_type": "consecutive"},
    {"executors": [thunder.extend.get_executor("torch")], "fusion_type": "dataflow", "verify": True},
    {"transforms": [], "reinplace": False, "certify_collectives": False, "skip_inplace_alias_updates": False},
    {"debug_options": thunder.DebugOptions(), "disable_torch_autograd": True, "torch_compile_fullgraph": True},
    {"compile_options": {"my_executor_option": 3}},
], ids=lambda kw: ",".join(kw) or "defaults")
def test_valid_spellings_compile_and_run(kwargs):
    jfn = thunder_ext.jit(add_one, **kwargs)
    a = torch.zeros(2)
    torch.testing.assert_close(jfn(a), torch.ones(2))
    torch.testing.assert_close(a, torch.ones(2))


def test_compile_options_reach_the_compilation_unchecked():
    jfn = thunder_ext.jit(add_one, executors=["torch"], compile_options={"my_executor_option": 3})
    jfn(torch.zeros(2))
    assert thunder.compile_data(jfn).compile_options["my_executor_option"] == 3


def test_the_known_compile_options_are_the_ones_thunder_asks_for():
    """Re-derived from Thunder's source: every option a pass asks for by a literal name (``get_compile_option("x",
    ...)``, ``compile_options.get("x")``) is known, so a Thunder that asks for a new one fails here (add it to
    ``THUNDER_COMPILE_OPTIONS``)."""
    source = "\n".join(p.read_text() for p in Path(thunder.__file__).parent.rglob("*.py"))
    asked = set(re.findall(r"get_compile_option\(\s*\"(\w+)\"", source))
    asked |= set(re.findall(r"compile_options\.get\(\s*\"(\w+)\"", source))
    asked -= {"skip_inplace_alias_updates"}  # thunder_ext's own switch (it always passes False to Thunder)
    assert asked <= THUNDER_COMPILE_OPTIONS, sorted(asked - THUNDER_COMPILE_OPTIONS)
