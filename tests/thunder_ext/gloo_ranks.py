"""Gloo ranks on 127.0.0.1 for tests: spawned once, reused by every test of a module, with a hard timeout per job.

Starting an interpreter that imports torch and Thunder costs seconds per rank, so :class:`GlooRanks` starts
``world_size`` spawned processes once (a free port picked by binding port 0, ``MASTER_ADDR=127.0.0.1``, a
process-group timeout) and then runs *jobs* on all of them: :meth:`GlooRanks.run` sends a module-level function
``job(rank, world_size, *args)`` by name to every rank and returns the per-rank results. A job that raises on a
rank, or that does not finish within its timeout on every rank (a collective that never matches), fails the call
with each rank's report, and the ranks are stopped: a rank left inside a collective cannot be reused, so the next
:meth:`run` starts fresh ones. A rank told to stop leaves its process group and exits at once (``os._exit``):
the interpreter's own teardown takes seconds per rank after Thunder and torch.compile ran.
"""

from __future__ import annotations

import datetime
import importlib
import multiprocessing
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

__all__ = ["GlooRanks", "RankFailure"]


_GRACE_S = 5.0
"""How long the other ranks may still answer once one rank reported an error."""


class RankFailure(AssertionError):
    """A job raised on some rank, or did not finish in time."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(rank: int, world_size: int, port: int, timeout_s: float, conn: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size))
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no pool of compile workers per rank
    try:
        import thunder_ext  # noqa: F401  (the named-tensor shim must come before thunder)
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        conn.send(("ready", None))
    except BaseException:  # noqa: BLE001 - reported to the parent
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        message = conn.recv()
        if message is None:
            break
        module, name, args = message
        try:
            job = getattr(importlib.import_module(module), name)
            conn.send(("ok", job(rank, world_size, *args)))
        except BaseException:  # noqa: BLE001 - reported to the parent
            conn.send(("error", traceback.format_exc()))
    dist.destroy_process_group()
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown (seconds per rank: Thunder's and torch's exit handlers); nothing is left


class GlooRanks:
    """``world_size`` spawned gloo ranks that run jobs (see the module docstring)."""

    def __init__(self, world_size: int = 2, *, timeout_s: float = 45.0) -> None:
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._procs: list[Any] = []
        self._conns: list[Any] = []

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        port = _free_port()
        for rank in range(self.world_size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(rank, self.world_size, port, self.timeout_s, child), daemon=True)
            proc.start()
            self._procs.append(proc)
            self._conns.append(parent)
        self._collect("start the ranks", self.timeout_s * 2)

    def run(self, job: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> list[Any]:
        """``job(rank, world_size, *args)`` on every rank; the results in rank order."""
        if not self._procs:
            self._start()
        for conn in self._conns:
            conn.send((job.__module__, job.__qualname__, args))
        return self._collect(job.__qualname__, timeout_s or self.timeout_s)

    def _collect(self, what: str, timeout_s: float) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        replies: list[tuple[str, Any] | None] = [None] * len(self._conns)
        pending = dict(enumerate(self._conns))
        while pending and (remaining := deadline - time.monotonic()) > 0:
            for conn in wait(list(pending.values()), timeout=remaining):
                rank = next(r for r, c in pending.items() if c is conn)
                replies[rank] = conn.recv()
                del pending[rank]
                if replies[rank][0] == "error":  # the others may be stuck in a collective: a short grace
                    deadline = min(deadline, time.monotonic() + _GRACE_S)
        if all(r is not None and r[0] in ("ok", "ready") for r in replies):
            return [r[1] for r in replies]  # type: ignore[index]
        self.close()
        report = "\n".join(
            f"--- rank {rank}: " + ("no answer in time" if r is None else f"{r[0]}\n{r[1]}")
            for rank, r in enumerate(replies)
        )
        raise RankFailure(f"{what} failed on {self.world_size} gloo ranks (timeout {timeout_s:.0f} s):\n{report}")

    def close(self) -> None:
        """Stop the ranks (a later :meth:`run` starts new ones)."""
        for conn in self._conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._procs, self._conns = [], []
