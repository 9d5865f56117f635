"""Real workloads (issue 16): per-step time, peak memory and compile counts of torch.optim steps and package models.

    python benchmarks/workloads.py [--runs 10] [--only sgd adam ...] [--no-torch-compile] [--threads 1]

Workloads (CPU, small sizes; the ``models`` extra provides litgpt and transformers, a missing package skips its
rows):

* ``torch.optim`` steps on the parameters of a 2-layer MLP (256 -> 512 -> 256, gradients preset): SGD (momentum,
  nesterov, weight decay), Adam and AdamW, ``foreach=False``/``True``; the step called is ``optimizer.step``
  itself (eager), ``torch.compile(optimizer.step)``, ``thunder.jit(optimizer.step)`` (stock: fails at the
  profiler's record-function call, reported), ``thunder_ext.jit(optimizer.step)`` (default executors, and
  ``executors=["torchcompile"]``: every region compiled by Inductor, beside ``torch.compile``);
* litgpt ``GPT`` (pythia-14m layout, 2 layers, n_embd 64): one training step (forward, loss, backward, SGD step;
  the model is compiled, the optimizer eager) and one KV-cache decoding step (one token, ``torch.no_grad``);
* transformers ``ResNetForImageClassification`` (tiny, BatchNorm in training, 2 images 32x32): one training step;
* transformers ``LlamaForCausalLM`` (2 layers, hidden 64, 4 heads, 2 key/value heads): one training step (``labels=``,
  the model's loss, 2x32 tokens) and one ``StaticCache`` decoding step (one token at position 10: ``index_copy_``
  into the cache, ``torch.no_grad``).

Matches eager: before timing, :data:`CHECK_CALLS` calls of the compiled step next to eager on a fresh, identically
seeded instance; ``ok`` when the outputs and every state tensor the step changes (parameters, buffers, optimizer
state, caches: each workload's ``state``) match (:func:`matches_eager`).

Per step: every compiler of a workload compiled and checked first, then all timed in turns (five rounds of
``--runs``/5 calls each after 2 warm-up calls, ``benchmarks/common.py``: ``interleaved_times``): the median, with the
fastest and slowest call; torch runs on ``--threads`` intra-op threads, 1 by default: with torch's pool
on every core of a small or shared machine a tiny step measures the contention (a litgpt decode step read 72 ms
there, against 2.5 ms on one thread);
peak memory: the bytes live above the pre-call baseline during one more call, from the allocator events of
``torch.profiler`` (``measure_memory``; CPU has no allocator statistics and ``tracemalloc`` does not see torch's
allocations). Compiles: Thunder's ``cache_misses`` over every call made (warm-up, timed, memory); for torch.compile
the number of frames dynamo compiled (``torch._dynamo.utils.counters["frames"]["ok"]``, reset per row).

Writes ``benchmarks/results/workloads.{json,md}``; with ``--only``, the rows measured replace theirs in the existing
results (every row's columns still come from one run; the environment of each run is kept per workload).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import thunder_ext  # noqa: E402  (before thunder: the import shim)
import thunder  # noqa: E402

from thunder_ext.testing.models import compare  # noqa: E402
from benchmarks.common import (RESULTS_DIR, describe_error, environment, fmt_bytes, fmt_seconds, markdown_table,  # noqa: E402
                               interleaved_times, measure_memory, write_results)

warnings.filterwarnings("ignore")
DEVICE = "cpu"


State = Callable[[], dict[str, torch.Tensor]]
"""The tensors a workload's step leaves changed (parameters, buffers, optimizer state, caches), by name."""


@dataclass
class Workload:
    name: str
    make: Callable[[], tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...], State]]
    """Returns (the step to compile, how to call a compiled step, the arguments, the state the step changes):
    ``run(compiled, *args)``. Each call builds a fresh, identically seeded instance."""


def _state(model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
           extra: State | None = None) -> State:
    """The state of a model (parameters, buffers) and an optimizer (parameters, per-parameter state tensors)."""
    def state() -> dict[str, torch.Tensor]:
        found: dict[str, torch.Tensor] = {}
        if model is not None:
            found |= {f"model.{n}": t for n, t in [*model.named_parameters(), *model.named_buffers()]}
        if optimizer is not None:
            for i, group in enumerate(optimizer.param_groups):
                for j, param in enumerate(group["params"]):
                    found[f"param[{i}][{j}]"] = param
                    found |= {f"state[{i}][{j}].{k}": v for k, v in optimizer.state.get(param, {}).items()
                              if isinstance(v, torch.Tensor)}
        return found | (extra() if extra is not None else {})

    return state


def _training(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              loss_of: Callable[[Callable[..., Any]], torch.Tensor]) -> Any:
    """A training step of ``model`` (the step compiled): ``loss_of(forward)``, ``.backward()``, the optimizer's step
    and ``zero_grad`` (eager, outside the compiled step); the loss is returned."""
    def run(forward: Callable[..., Any]) -> Any:
        loss = loss_of(forward)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return model, run, (), _state(model, optimizer)


# --- optimizers ---------------------------------------------------------------------------------------------------
def _optimizer(kind: str, foreach: bool) -> Callable[[], Any]:
    def make() -> Any:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        params = list(model.parameters())
        optimizer = {
            "sgd": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9, nesterov=True, weight_decay=1e-4,
                                           foreach=foreach),
            "adam": lambda: torch.optim.Adam(params, lr=1e-3, foreach=foreach),
            "adamw": lambda: torch.optim.AdamW(params, lr=1e-3, foreach=foreach),
        }[kind]()
        return optimizer.step, (lambda step: step()), (), _state(optimizer=optimizer)

    return make


# --- litgpt --------------------------------------------------------------------------------------------------------
def _tiny_gpt() -> Any:
    import litgpt

    torch.manual_seed(0)
    config = litgpt.Config.from_name("pythia-14m", n_layer=2, n_embd=64, n_head=4, block_size=64, vocab_size=256,
                                     padded_vocab_size=256)
    return litgpt.GPT(config)


def _litgpt_train() -> Any:
    model = _tiny_gpt()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(2))

    return _training(model, optimizer, lambda forward: torch.nn.functional.cross_entropy(
        forward(tokens).reshape(-1, 256), targets.reshape(-1)))


def _litgpt_decode() -> Any:
    model = _tiny_gpt().eval()
    model.set_kv_cache(batch_size=1, max_seq_length=64)
    token = torch.tensor([[7]])
    position = torch.tensor([10])

    def run(forward: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return forward(token, position)

    return model, run, (), _state(model)  # the KV cache: buffers of the attention blocks


# --- transformers ResNet -------------------------------------------------------------------------------------------
def _resnet_train() -> Any:
    import transformers

    torch.manual_seed(0)
    config = transformers.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                       layer_type="basic", num_labels=10)
    model = transformers.ResNetForImageClassification(config).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])

    return _training(model, optimizer,
                     lambda forward: torch.nn.functional.cross_entropy(forward(images).logits, labels))


# --- transformers Llama --------------------------------------------------------------------------------------------
def _tiny_llama() -> Any:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config)


def _llama_train() -> Any:
    model = _tiny_llama().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))

    return _training(model, optimizer, lambda forward: forward(input_ids=tokens, labels=tokens, use_cache=False).loss)


def _llama_decode() -> Any:
    import transformers

    model = _tiny_llama().eval()
    cache = transformers.StaticCache(config=model.config, max_cache_len=64)
    cache.early_initialization(batch_size=1, num_heads=2, head_dim=16, dtype=torch.float32, device=torch.device(DEVICE))
    token, position = torch.tensor([[7]]), torch.tensor([10])

    def run(forward: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return forward(input_ids=token, past_key_values=cache, cache_position=position, use_cache=True).logits

    def cache_state() -> dict[str, torch.Tensor]:
        return {f"cache.layers[{i}].{k}": getattr(layer, k) for i, layer in enumerate(cache.layers)
                for k in ("keys", "values")}

    return model, run, (), _state(model, extra=cache_state)


WORKLOADS = [Workload(f"{k} foreach={f}", _optimizer(k, f)) for k in ("sgd", "adam", "adamw") for f in (False, True)]
WORKLOADS += [Workload("litgpt train step", _litgpt_train), Workload("litgpt KV-cache decode step", _litgpt_decode),
              Workload("transformers ResNet train step", _resnet_train),
              Workload("transformers Llama train step", _llama_train),
              Workload("transformers Llama StaticCache decode step", _llama_decode)]

COMPILERS: dict[str, Callable[[Any], Any]] = {
    "eager": lambda fn: fn,
    "torch.compile": torch.compile,
    "thunder.jit (stock)": thunder.jit,
    "thunder_ext.jit": thunder_ext.jit,
    "thunder_ext.jit torchcompile": lambda fn: thunder_ext.jit(fn, executors=["torchcompile"]),
}


def _compiles(compiler: str, compiled: Any) -> Any:
    if compiler == "torch.compile":
        from torch._dynamo.utils import counters

        return counters["frames"]["ok"]
    if compiler.startswith("thunder"):
        target = getattr(compiled, "__wrapped__", compiled)
        return thunder.cache_misses(target)
    return "—"


RTOL, ATOL = 1e-4, 1e-5
"""Tolerance of the comparison with eager (``torch.allclose``; fusion may reorder float reductions)."""
CHECK_CALLS = 3
"""Calls of the compiled step compared with eager's, before timing (they are also the warm-up)."""


def matches_eager(workload: Workload, run: Callable[..., Any], compiled: Any, args: tuple[Any, ...],
                  state: State) -> str:
    """``ok`` when :data:`CHECK_CALLS` calls of ``compiled`` return what eager returns on a fresh, identical
    instance and leave every state tensor as eager leaves it (within :data:`RTOL`/:data:`ATOL`); else
    ``WRONG (...)`` naming the first difference."""
    eager_step, eager_run, eager_args, eager_state = workload.make()
    for call in range(CHECK_CALLS):
        pairs = {"output": (run(compiled, *args), eager_run(eager_step, *eager_args))}
        got, want = state(), eager_state()
        if got.keys() != want.keys():
            return f"WRONG (call {call + 1}: state {sorted(got.keys() ^ want.keys())[:2]} differs from eager's)"
        pairs |= {name: (got[name], want[name]) for name in want}
        for name, (g, w) in pairs.items():
            _, found = compare(w, g, RTOL, ATOL, name)
            if found:
                return f"WRONG (call {call + 1}, {found[0].name}: {found[0].detail})"
    return "ok"


def prepare(workload: Workload, compiler: str) -> tuple[dict[str, Any], Callable[[], Any] | None]:
    """Compile once; compare with eager (:func:`matches_eager`) and measure memory: the row without its time, and the
    compiled step to time (``None`` when the compiler failed: the row records the error)."""
    step, run, args, state = workload.make()
    if compiler == "torch.compile":
        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()
    try:
        compiled = COMPILERS[compiler](step)
        check = "—" if compiler == "eager" else matches_eager(workload, run, compiled, args, state)
        def one_step() -> Any:
            return run(compiled, *args)

        memory = measure_memory(one_step, (), DEVICE)
        return {"peak": memory.peak, "compiles": _compiles(compiler, compiled), "check": check}, one_step
    except Exception as e:  # a compiler that cannot run the workload: reported, not fatal
        message = describe_error(e)
        if "--verbose" in sys.argv:
            traceback.print_exc()
        return {"error": message}, None


def measure(workload: Workload, compilers: Sequence[str], runs: int,
            progress: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Every compiler's row of ``workload``: each prepared (:func:`prepare`), then all timed in turns
    (:func:`common.interleaved_times`, ``runs`` calls each in five rounds), so that the host's drift weighs on every
    compiler alike and the ratios hold; ``progress`` is told which compiler is being prepared.

    Raises:
        ImportError: the workload's package is not installed (the ``models`` extra).
    """
    rows, steps = {}, {}
    for compiler in compilers:
        if progress is not None:
            progress(f"{workload.name} / {compiler} ...")
        rows[compiler], step = prepare(workload, compiler)
        if step is not None:
            steps[compiler] = step
    rounds = 5
    for compiler, timing in interleaved_times(steps, (), DEVICE, rounds=rounds, runs=max(1, runs // rounds),
                                              warmup=2).items():
        rows[compiler] |= {"time": timing.median_s, "min": timing.min_s, "max": timing.max_s}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=None, help="workload name prefixes")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: see the docstring)")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    compilers = [c for c in COMPILERS if not (options.no_torch_compile and c == "torch.compile")]
    rows, record = [], {"environment": environment(DEVICE), "runs": options.runs, "results": {}}
    previous = RESULTS_DIR / "workloads.json"
    if options.only and previous.exists():
        record = json.loads(previous.read_text())
        record.setdefault("environments", {})
    for workload in WORKLOADS:
        if options.only and not any(workload.name.startswith(p) for p in options.only):
            continue
        try:
            record["results"][workload.name] = measure(workload, compilers, options.runs,
                                                       progress=lambda line: print(line, flush=True))
        except ImportError as e:  # the models extra is not installed
            record["results"][workload.name] = {c: {"error": f"skipped: {e}"} for c in compilers}
        if "environments" in record:
            record["environments"][workload.name] = {"environment": environment(DEVICE), "runs": options.runs}
    for workload in WORKLOADS:
        results = record["results"].get(workload.name)
        if results is None:
            continue
        eager = results.get("eager", {}).get("time")
        inductor = results.get("torch.compile", {}).get("time")
        for compiler, r in results.items():
            if "error" in r:
                rows.append([workload.name, compiler, "fails", "", "", "", "", "", r["error"]])
                continue
            ratio = f"{r['time'] / eager:.2f}x" if eager else ""
            to_inductor = f"{r['time'] / inductor:.2f}x" if inductor else ""
            spread = f"{fmt_seconds(r['min'])}–{fmt_seconds(r['max'])}" if "min" in r else "not recorded"
            rows.append([workload.name, compiler, r.get("check", "not checked"), fmt_seconds(r["time"]), spread,
                         ratio, to_inductor, fmt_bytes(r["peak"]), r["compiles"]])
    markdown = "\n\n".join([
        "# Real workloads: torch.optim steps and package models (CPU)",
        "Produced by `python benchmarks/workloads.py` (see its docstring for the workloads and the method). Time: "
        f"median of {options.runs} calls after 2 warm-up calls, every compiler of a workload timed in turns "
        f"(5 rounds), torch on {torch.get_num_threads()} thread(s); ratios to eager and to torch.compile, same run. "
        "Peak: bytes live above "
        "the pre-call baseline during one call, from `torch.profiler`'s allocator events (CPU). Compiles: Thunder's "
        "`cache_misses` over all calls of the row; torch.compile: frames dynamo compiled. Matches eager: "
        f"{CHECK_CALLS} calls of the compiled step next to eager on an identical fresh instance, outputs and every "
        f"state tensor (parameters, buffers, optimizer state, caches) within rtol {RTOL:g}, atol {ATOL:g}.",
        markdown_table(["workload", "compiler", "matches eager", "per step", "min–max", "vs eager",
                        "vs torch.compile", "peak memory", "compiles / error"], rows),
        f"Environment: `{record['environment']}`",
        *[f"Re-measured alone (`--only`, {again['runs']} calls, on a machine shared with other jobs: noisy): {name}, "
          f"environment `{again['environment']}`" for name, again in record.get("environments", {}).items()],
    ])
    write_results("workloads", record, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
