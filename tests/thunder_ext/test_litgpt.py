"""litgpt (Lightning's model zoo) through thunder_ext.jit (issue 16): a tiny random-initialised ``GPT`` — forward,
KV-cache greedy decoding (``set_kv_cache``: the cache buffers are written in place every step) and training steps —
matches eager, with the default executors, ``["torch"]`` and ``["torchcompile"]`` (each test under two of them:
:func:`_slow`; the forward's logits on the torch executor, the training steps' losses under the others). Skipped
when litgpt is not installed; nothing is downloaded. The default-executor training crash this issue reported was in
:mod:`thunder_ext.passes.inductor_guard` (reduced:
``test_inductor_guard.test_effects_on_an_operand_the_call_leaves_out``).

Compile counts: decoding compiles twice (the prompt, then every one-token step: the position is a tensor input)."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402

VOCAB = 64
PROMPT = 5
NEW_TOKENS = 8

EXECUTORS = {"default": None, "torch": ["torch"], "torchcompile": ["torchcompile"]}


def tiny_gpt() -> torch.nn.Module:
    litgpt = pytest.importorskip("litgpt")  # here, not at collection: importing litgpt takes ~8 s of CPU per process
    torch.manual_seed(0)
    config = litgpt.Config.from_name("pythia-14m", n_layer=2, n_embd=32, n_head=4, block_size=32,
                                     vocab_size=VOCAB, padded_vocab_size=VOCAB)
    return litgpt.GPT(config)


def _jit(model: torch.nn.Module, executors: str) -> torch.nn.Module:
    chosen = EXECUTORS[executors]
    return thunder_ext.jit(model) if chosen is None else thunder_ext.jit(model, executors=chosen)


def train(model: torch.nn.Module, forward, steps: int = 3) -> list[torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(tokens).reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


def decode(model: torch.nn.Module, forward) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy decoding with litgpt's KV cache: the prompt, then one token per call at its position."""
    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    model.set_kv_cache(batch_size=1, max_seq_length=32)
    with torch.no_grad():
        logits = forward(prompt, torch.arange(PROMPT))
        token = logits[:, -1].argmax(-1, keepdim=True)
        tokens = [token]
        for i in range(NEW_TOKENS - 1):
            logits = forward(token, torch.tensor([PROMPT + i]))
            token = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token)
    caches = [t.clone() for block in model.transformer.h for t in (block.attn.kv_cache.k, block.attn.kv_cache.v)]
    return torch.cat(tokens, 1), caches


def _slow(*names: str) -> list[object]:
    """Every model cell is slow (10-40 s on two cores). Each test under two of the three executor configurations,
    each configuration under two tests: decoding under torch and torchcompile (the default executors' are torch's
    but for ``cat``), training under the default executors (where this issue's crash was) and torchcompile."""
    return [pytest.param(name, marks=pytest.mark.slow) for name in names]


@pytest.mark.slow  # one executor: the training steps compare the same forward's loss on all three
def test_forward_matches_eager():
    eager = tiny_gpt()
    model = tiny_gpt()
    tokens = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(_jit(model, "torch")(tokens), eager(tokens))


@pytest.mark.parametrize("executors", _slow("torch", "torchcompile"))  # ~10-20 s per cell on 2 cores: CI runs them
def test_kv_cache_greedy_decoding_matches_eager(executors):
    eager = tiny_gpt().eval()
    expected_tokens, expected_caches = decode(eager, eager)
    model = tiny_gpt().eval()
    jitted = _jit(model, executors)
    tokens, caches = decode(model, jitted)
    assert torch.equal(tokens, expected_tokens)
    torch.testing.assert_close(caches, expected_caches)
    assert thunder.cache_misses(jitted) == 2  # the prompt; every one-token step after it


@pytest.mark.parametrize("executors", _slow("default", "torchcompile"))
def test_training_steps_match_eager(executors):
    eager = tiny_gpt()
    expected = train(eager, eager)
    model = tiny_gpt()
    got = train(model, _jit(model, executors))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(dict(model.named_parameters()), dict(eager.named_parameters()))
