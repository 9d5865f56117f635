"""Measurement helpers shared by the demo and the benchmarks: timing, memory, progress, result files.

Timing: :func:`time_call` measures one call (a first call includes tracing and compilation);
:func:`median_time` runs warm-up calls, then ``runs`` timed calls and reports the median (and the spread), with
device synchronisation on CUDA so asynchronous kernels are included.

Memory: :func:`measure_memory` runs one call and reports the peak bytes live above the pre-call baseline and the
total bytes allocated during the call.

* CUDA: ``torch.cuda.reset_peak_memory_stats`` / ``max_memory_allocated`` and the caching allocator's
  ``allocated_bytes.all.allocated`` counter.
* CPU: torch has no CPU allocator statistics, and ``tracemalloc`` does not see torch's allocations, so the call
  runs under ``torch.profiler`` with ``profile_memory=True``; every ``[memory]`` event carries the signed size of
  one allocation or free made through c10's CPU allocator (eager kernels, Inductor-generated code and Thunder's
  torch executor all allocate through it). The running sum of those events gives the peak; the positive ones the
  total. The profiler slows the call down, so memory is never measured in a timed call.

Results: :func:`write_results` saves a JSON record (with :func:`environment`) and a Markdown report under
``benchmarks/results/``; :func:`markdown_table` formats rows. :class:`Progress` prints what is compiling, with a
live elapsed-time spinner on a terminal and one line per step otherwise.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import torch
from typing_extensions import Self

__all__ = [
    "RESULTS_DIR",
    "Memory",
    "Progress",
    "Timing",
    "environment",
    "fmt_bytes",
    "interleaved_times",
    "fmt_seconds",
    "jsonable",
    "markdown_table",
    "measure_memory",
    "median_time",
    "synchronize",
    "time_call",
    "write_results",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels on a CUDA device (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[..., Any], args: Sequence[Any], device: torch.device | str) -> tuple[Any, float]:
    """Call ``fn(*args)`` once; return (result, seconds), synchronising the device before and after."""
    synchronize(device)
    start = time.perf_counter()
    result = fn(*args)
    synchronize(device)
    return result, time.perf_counter() - start


@dataclass(frozen=True, slots=True)
class Timing:
    """Median of ``runs`` timed calls after ``warmup`` untimed ones, with the extremes and the quartiles."""

    median_s: float
    min_s: float
    max_s: float
    runs: int
    warmup: int
    q1_s: float
    q3_s: float

    @property
    def spread(self) -> float:
        """Interquartile range over the median: 0.1 means the middle half of the calls lie within 10%."""
        return (self.q3_s - self.q1_s) / self.median_s if self.median_s > 0 else 0.0


def median_time(
    fn: Callable[..., Any],
    args: Sequence[Any],
    device: torch.device | str,
    *,
    runs: int = 20,
    warmup: int = 3,
    max_seconds: float | None = None,
) -> Timing:
    """Median per-call time of ``fn(*args)``; stops early (after at least 3 runs) once ``max_seconds`` is spent."""
    for _ in range(warmup):
        fn(*args)
    samples: list[float] = []
    budget_start = time.perf_counter()
    for _ in range(runs):
        samples.append(time_call(fn, args, device)[1])
        if max_seconds is not None and len(samples) >= 3 and time.perf_counter() - budget_start > max_seconds:
            break
    return _timing(samples, warmup)


def _timing(samples: Sequence[float], warmup: int) -> Timing:
    q1, _, q3 = statistics.quantiles(samples, n=4) if len(samples) > 1 else (samples[0],) * 3
    return Timing(statistics.median(samples), min(samples), max(samples), len(samples), warmup, q1, q3)


def interleaved_times(
    fns: Mapping[str, Callable[..., Any]],
    args: Sequence[Any],
    device: torch.device | str,
    *,
    rounds: int = 5,
    runs: int = 10,
    warmup: int = 3,
) -> dict[str, Timing]:
    """Per-call times of several functions measured in turns: ``rounds`` rounds, each timing ``runs`` calls of every
    function in order, so that a machine that slows down or speeds up (other tenants) weighs on all of them alike
    and their ratios hold; the median of each function's ``rounds * runs`` calls."""
    for fn in fns.values():
        for _ in range(warmup):
            fn(*args)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name] += [time_call(fn, args, device)[1] for _ in range(runs)]
    return {name: _timing(found, warmup) for name, found in samples.items()}


@dataclass(frozen=True, slots=True)
class Memory:
    """Bytes of one call: ``peak`` live above the pre-call baseline, ``allocated`` in total during the call."""

    peak: int
    allocated: int
    method: str  # "cuda-allocator" or "torch-profiler"


def measure_memory(fn: Callable[..., Any], args: Sequence[Any], device: torch.device | str) -> Memory:
    """Peak and total allocation of one ``fn(*args)`` call (see the module docstring for how)."""
    device = torch.device(device)
    if device.type == "cuda":
        synchronize(device)
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        allocated_before = torch.cuda.memory_stats(device).get("allocated_bytes.all.allocated", 0)
        result = fn(*args)
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - baseline
        allocated = torch.cuda.memory_stats(device).get("allocated_bytes.all.allocated", 0) - allocated_before
        del result
        return Memory(peak, allocated, "cuda-allocator")
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False)
    with _native_stderr_silenced():  # kineto logs profiler start/stop lines straight to fd 2
        prof.__enter__()
    try:
        result = fn(*args)
    finally:
        with _native_stderr_silenced():
            prof.__exit__(None, None, None)
    del result
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = allocated = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
        allocated += max(nbytes, 0)
    return Memory(peak, allocated, "torch-profiler")


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null (native code bypasses ``sys.stderr``), then restore it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class Progress:
    """``with Progress("compiling adam with thunder.jit"):`` — shows a spinner with elapsed time on a TTY.

    Off a terminal (CI logs, pipes) it prints the label when the step starts and the elapsed time when it ends.
    """

    _FRAMES = "|/-\\"

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def __enter__(self) -> Self:
        self._start = time.perf_counter()
        if self.stream.isatty():
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        else:
            print(f"  {self.label} ...", file=self.stream, flush=True)
        return self

    def _spin(self) -> None:
        frame = 0
        while not self._stop.wait(0.2):
            elapsed = time.perf_counter() - self._start
            print(f"\r  {self._FRAMES[frame % 4]} {self.label} ({elapsed:4.1f}s)", end="", file=self.stream,
                  flush=True)
            frame += 1

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.elapsed = time.perf_counter() - self._start
        status = "failed" if exc_type is not None else "done"
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            print(f"\r  {status}: {self.label} ({self.elapsed:.1f}s)" + " " * 8, file=self.stream, flush=True)
        else:
            print(f"  {status} in {self.elapsed:.1f}s", file=self.stream, flush=True)


def environment(device: torch.device | str) -> dict[str, Any]:
    """Versions and hardware the numbers were measured on."""
    device = torch.device(device)
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    try:
        from importlib.metadata import version

        env["lightning-thunder"] = version("lightning-thunder")
    except Exception:  # noqa: BLE001 - metadata lookup is best-effort reporting, never a failure
        env["lightning-thunder"] = None
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are formatted with ``str``."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(
    name: str, record: dict[str, Any], markdown: str, directory: Path = RESULTS_DIR
) -> tuple[Path, Path]:
    """Write ``<name>.json`` (``record``) and ``<name>.md`` (``markdown``) under ``directory``; return both."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / f"{name}.json", directory / f"{name}.md"
    json_path.write_text(json.dumps(jsonable(record), indent=2, sort_keys=False) + "\n")
    md_path.write_text(markdown.rstrip() + "\n")
    return json_path, md_path


def jsonable(value: Any) -> Any:
    """``value`` with dataclasses turned into dicts, tuples into lists and non-finite floats into None."""
    if hasattr(value, "__dataclass_fields__"):
        return jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def fmt_seconds(seconds: float | None) -> str:
    """Human-readable duration: ``12.3 µs``, ``4.56 ms``, ``1.23 s``; ``—`` for None."""
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def describe_error(error: BaseException, limit: int = 200) -> str:
    """``Type: message`` for a one-line report, never cut mid-sentence: the message's first sentence (up to a full
    stop that ends it or its first line), or its first line when that has none; a first line that opens a bracket
    it does not close (a multi-line repr such as ``ProvenanceRecord(`` follows) stops before that bracket, and a
    sentence over ``limit`` characters at its last whole word; a cut is marked `` …``."""
    line = (str(error).strip().splitlines() or [""])[0]
    if end := re.search(r"\.(\s|$)", line):
        line = line[: end.start() + 1]
    unclosed: list[int] = []
    for i, c in enumerate(line):
        if c in "([{":
            unclosed.append(i)
        elif c in ")]}" and unclosed:
            unclosed.pop()
    cut = bool(unclosed)
    if unclosed:
        line = line[: unclosed[0]].rstrip()
    if len(line) > limit:
        line, cut = line[:limit].rsplit(" ", 1)[0], True
    line += " …" if cut else ""
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def fmt_bytes(nbytes: int | None) -> str:
    """Human-readable size in KiB/MiB/GiB; ``—`` for None."""
    if nbytes is None:
        return "—"
    if abs(nbytes) < 1024:
        return f"{nbytes} B"
    value, unit = nbytes / 1024, "KiB"
    for larger in ("MiB", "GiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit}"
