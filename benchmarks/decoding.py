"""Greedy decoding through ``thunder_ext.jit``: how often it compiles, whether its tokens are eager's, how fast.

Each row decodes ``--tokens`` tokens (a prompt of 5, then one token per call) with a tiny random-initialised model
(nothing downloaded) on the torch executor, eager and ``thunder_ext.jit`` on fresh identical copies, in this process:

* litgpt ``GPT`` with its KV cache (``set_kv_cache``; ``input_pos`` a tensor);
* Hugging Face ``transformers`` Llama, Mistral (``sliding_window`` set: its cache layers keep Python ints), Qwen2 and
  GPT-2, each with a ``StaticCache`` (``cache_position`` a tensor) and with a ``DynamicCache`` (made empty, filled by
  the first call; its tensors grow by one position per token).

Columns: compilations (``thunder.cache_misses`` over the whole decode), tokens and cache contents equal to eager's,
the first call (tracing and compilation), the median of the one-token calls after the last compilation against
eager's, and the recompile reasons (:func:`thunder_ext.explain_recompiles`, the most frequent). Python numbers that
change from token to token are made inputs of the trace after their first change
(:mod:`thunder_ext.dynamic_numbers`), and so are tensor sizes (:mod:`thunder_ext.dynamic_shapes`): the prompt's
length changes at the first one-token call, and a ``DynamicCache``'s tensors, written back one position longer than
they were read, are made dynamic in that same compilation.

Run: ``python benchmarks/decoding.py`` (about 10 minutes on 2 CPU cores); writes ``benchmarks/results/decoding.md``
and ``.json``.
"""

from __future__ import annotations

import argparse
import collections
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import thunder_ext  # noqa: E402  (before thunder)
import thunder  # noqa: E402

from common import describe_error, environment, fmt_seconds, markdown_table, write_results  # noqa: E402

VOCAB, PROMPT = 128, 5


def _hf(name: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    common = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                                                    n_positions=128)).eval()
    if name == "mistral":
        return transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=16, **common)).eval()
    if name == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common)).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()


def _greedy(step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], tokens: int) -> tuple[Any, list[float]]:
    """``tokens`` greedy tokens: ``step(ids, positions)`` gives the logits, first for the prompt, then for each token
    at its position; the tokens and the time of each call."""
    ids = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    chosen, times = [], []
    with torch.no_grad():
        for position in range(PROMPT - 1, PROMPT - 1 + tokens):
            where = torch.arange(PROMPT) if position == PROMPT - 1 else torch.tensor([position])
            start = time.perf_counter()
            logits = step(ids, where)
            times.append(time.perf_counter() - start)
            ids = logits[:, -1].argmax(-1, keepdim=True)
            chosen.append(ids)
    return torch.cat(chosen, 1), times


def _hf_decoder(name: str, cache_kind: str) -> Callable[[Callable[..., Any], int], tuple[Any, list[float]]]:
    import transformers

    def decode(forward: Callable[..., Any], tokens: int) -> tuple[Any, list[float]]:
        cache = (transformers.DynamicCache() if cache_kind == "DynamicCache"
                 else transformers.StaticCache(config=_CONFIGS[name], max_cache_len=64))
        chosen, times = _greedy(lambda ids, where: forward(input_ids=ids, past_key_values=cache, cache_position=where,
                                                           use_cache=True).logits, tokens)
        return (chosen, [t.clone() for layer in cache.layers for t in (layer.keys, layer.values)]), times

    return decode


_CONFIGS: dict[str, Any] = {}


def _litgpt() -> torch.nn.Module:
    import litgpt

    torch.manual_seed(0)
    config = litgpt.Config.from_name("pythia-14m", n_layer=2, n_embd=64, n_head=4, block_size=128,
                                     vocab_size=VOCAB, padded_vocab_size=VOCAB)
    model = litgpt.GPT(config).eval()
    model.set_kv_cache(batch_size=1, max_seq_length=64)
    return model


def _litgpt_decode(forward: Callable[..., Any], tokens: int, model: torch.nn.Module) -> tuple[Any, list[float]]:
    chosen, times = _greedy(forward, tokens)
    caches = [t.clone() for block in model.transformer.h for t in (block.attn.kv_cache.k, block.attn.kv_cache.v)]
    return (chosen, caches), times


def _row(label: str, make: Callable[[], torch.nn.Module], decode: Any, tokens: int) -> dict[str, Any]:
    eager_model = make()
    jitted_model = copy.deepcopy(eager_model)
    row: dict[str, Any] = {"workload": label, "tokens": tokens}
    print(f"{label}: eager...", flush=True)
    expected, eager_times = decode(eager_model, tokens, eager_model)
    jitted = thunder_ext.jit(jitted_model, executors=["torch"])
    print(f"{label}: thunder_ext.jit...", flush=True)
    try:
        got, times = decode(jitted, tokens, jitted_model)
    except Exception as error:  # a row that fails is reported, not hidden
        row.update(error=describe_error(error))
        return row
    reasons = thunder_ext.explain_recompiles(jitted)
    last = 1 + max((i for i, t in enumerate(times) if t > 10 * min(times)), default=0)
    steady = times[last:] or times[-1:]
    row.update(compilations=thunder.cache_misses(jitted), equal=_equal(got, expected), first_call_s=times[0],
               per_token_s=statistics.median(steady), eager_per_token_s=statistics.median(eager_times[1:]),
               reasons=collections.Counter(f"{r.kind.value} of {r.path}" for r in reasons).most_common(2))
    return row


def _equal(got: Any, expected: Any) -> bool:
    try:
        torch.testing.assert_close(got, expected)
    except AssertionError:
        return False
    return True


def _cases(tokens: int) -> list[tuple[str, Callable[[], torch.nn.Module], Any, int]]:
    cases: list[tuple[str, Callable[[], torch.nn.Module], Any, int]] = [
        ("litgpt KV cache", _litgpt, lambda f, n, m: _litgpt_decode(f, n, m), tokens)]
    for name in ("llama", "mistral", "qwen2", "gpt2"):
        _CONFIGS[name] = _hf(name).config
        for kind in ("StaticCache", "DynamicCache"):
            decoder = _hf_decoder(name, kind)
            cases.append((f"{name} {kind}", lambda name=name: _hf(name), lambda f, n, m, d=decoder: d(f, n), tokens))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for label, make, decode, tokens in _cases(args.tokens):
        if args.only in label:
            rows.append(_row(label, make, decode, tokens))
            print(rows[-1], flush=True)
    table = markdown_table(
        ["workload", "tokens", "compilations", "tokens and cache = eager", "first call", "per token", "eager per token",
         "most frequent recompile reasons"],
        [[r["workload"], r["tokens"], r.get("compilations", ""), r.get("equal", r.get("error", "")),
          fmt_seconds(r.get("first_call_s")), fmt_seconds(r.get("per_token_s")),
          fmt_seconds(r.get("eager_per_token_s")), "; ".join(f"{k} ({n})" for k, n in r.get("reasons", []))]
         for r in rows])
    print(table)
    intro = ("Produced by `python benchmarks/decoding.py` (see its docstring); torch on 1 thread, CPU, tiny random "
             "models; times in the same process. *Per token*: the median one-token call after the last compilation.")
    write_results("decoding", {"environment": environment("cpu"), "rows": rows},
                  f"# Greedy decoding through thunder_ext.jit\n\n{intro}\n\n{table}")


if __name__ == "__main__":
    main()
