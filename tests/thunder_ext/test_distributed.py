"""Collectives through ``thunder_ext.jit`` on 2 gloo ranks (127.0.0.1, spawned once for the module).

* In-place/collective ordering programs (``dist_programs.PROGRAMS``): outputs and inputs after the call equal eager
  on every rank, first call and cache hit, under the torch executor and torchcompile with both fusion types (with
  and without collectives inside its regions). Stock ``thunder.jit`` gets the remat case wrong where torch.compile
  regions leave the collective outside (the bug the effect pipeline fixes), which shows the check can fail.
* Two process groups are not serialized against each other; one group's collectives stay ordered.
* Asynchronous collectives (``async_op=True``, functional collectives and ``wait_tensor``): readers of the buffer
  they write run after the wait (Thunder's ``sort_waits`` moved them before it: ``async_gather``).
* Data-parallel training: Thunder's ``ddp`` and ``fsdp`` (ZeRO-2 and ZeRO-3, with and without bucketing) over
  ``thunder_ext.jit`` for 3 steps (forward, backward, SGD) equal eager ``DistributedDataParallel`` in losses,
  parameters and buffers on every rank.
* The collective-order certificate: a rank that compiles a different collective order fails on the first call,
  on every rank, naming the first differing collective, in seconds; without it the call silently completes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import dist_programs  # noqa: E402
from gloo_ranks import GlooRanks  # noqa: E402

pytestmark = pytest.mark.xdist_group("gloo_ranks")
"""Under the README's ``-n auto`` (with ``--dist loadgroup`` from pyproject) this module runs on one worker, so its
module-scoped pool of rank processes starts once."""


@pytest.fixture(scope="module")
def ranks():
    pool = GlooRanks(2, timeout_s=45.0)
    yield pool
    pool.close()


DEFAULT_CONFIGS = ("torch", "torchcompile-nocomm")
"""Run by default: collectives between torch-executor ops, and outside fusion regions (where their order is ours to
keep); the other configurations (collectives inside torch.compile regions, dataflow fusion) are ``slow``."""
OTHER_CONFIGS = tuple(config for config in dist_programs.CONFIGS if config not in DEFAULT_CONFIGS)


@pytest.mark.parametrize("configs", [pytest.param(DEFAULT_CONFIGS, id="default-configs"),
                                     pytest.param(OTHER_CONFIGS, id="other-configs", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(dist_programs.PROGRAMS))
def test_program_matches_eager_on_every_rank(ranks, name, configs):
    reports = ranks.run(dist_programs.check_program, name, configs)
    failures = {f"rank {r} {config}": found for r, report in enumerate(reports)
                for config, found in report.items() if found}
    assert failures == {}


def test_stock_thunder_recomputes_across_the_all_reduce(ranks):
    """The matrix can fail: stock Thunder with collectives outside torch.compile regions gives a wrong value."""
    reports = ranks.run(dist_programs.check_program, "remat", ("torchcompile-nocomm",), "thunder")
    assert all(report["torchcompile-nocomm"] for report in reports)


def test_two_groups_are_not_serialized(ranks):
    pairs = ranks.run(dist_programs.collective_paths, "two_groups")[0]
    assert len(pairs) == 1 and not pairs[0][2], pairs  # no path between the groups' all-reduces
    pairs = ranks.run(dist_programs.collective_paths, "same_group")[0]
    assert len(pairs) == 1 and pairs[0][2], pairs  # one group's two all-reduces (on different tensors): ordered


DATA_PARALLEL = [("ddp", "torch"), ("fsdp", "torch"), ("fsdp-zero3-block", "torch")]
"""Run by default: each kind of data parallelism once, on the torch executor; the other cells (through torch.compile
regions: 3-10 s of two ranks each) are ``slow``."""
DATA_PARALLEL_SLOW = [("fsdp", "torchcompile"), ("ddp", "torchcompile-nocomm/dataflow"), ("ddp", "torchcompile-nocomm"),
                      ("fsdp", "torchcompile/dataflow"), ("fsdp", "torchcompile-nocomm"),
                      ("fsdp", "torchcompile-nocomm/dataflow"), ("fsdp-zero3", "torchcompile"), ("fsdp-layer", "torch"),
                      ("fsdp-zero3-block", "torchcompile")]


@pytest.mark.parametrize("kind,config", [*DATA_PARALLEL, *(pytest.param(*p, marks=pytest.mark.slow)
                                                            for p in DATA_PARALLEL_SLOW)])
def test_data_parallel_training_matches_eager_ddp(ranks, kind, config):
    reports = ranks.run(dist_programs.data_parallel, kind, config, timeout_s=120.0)
    assert reports == [[], []]


def test_certificate_names_the_first_differing_collective(ranks):
    (message, seconds), (message_1, seconds_1) = ranks.run(dist_programs.planted_divergence, True)
    assert message == message_1  # every rank fails, with the same text
    assert "first difference is collective #0" in message
    assert "rank 0: torch_all_reduce_prim_impl(f32[4] x, SUM" in message
    assert "rank 1: torch_all_reduce_prim_impl(f32[4] y, SUM" in message
    assert max(seconds, seconds_1) < 30.0  # the process group's timeout is 45 s


def test_without_the_certificate_the_divergence_is_silent(ranks):
    assert [message for message, _ in ranks.run(dist_programs.planted_divergence, False)] == ["", ""]
