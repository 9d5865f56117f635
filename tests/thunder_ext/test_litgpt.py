"""litgpt (Lightning's model zoo) through thunder_ext.jit: a tiny random-initialised ``GPT`` trained for two steps
with the default executors matches eager (losses and parameters). Skipped when litgpt is not installed; nothing is
downloaded. Issue 16: this crashed in :mod:`thunder_ext.inductor_guard` (the reduced pattern is
``test_inductor_guard.test_effects_on_an_operand_the_call_leaves_out``)."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")
litgpt = pytest.importorskip("litgpt")

import torch  # noqa: E402

import thunder_ext  # noqa: E402

VOCAB = 64


def tiny_gpt() -> torch.nn.Module:
    torch.manual_seed(0)
    config = litgpt.Config.from_name("pythia-14m", n_layer=2, n_embd=32, n_head=4, block_size=16,
                                     vocab_size=VOCAB, padded_vocab_size=VOCAB)
    return litgpt.GPT(config)


def train(model: torch.nn.Module, forward, steps: int = 2) -> list[torch.Tensor]:
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


def test_training_steps_with_default_executors_match_eager():
    eager = tiny_gpt()
    expected = train(eager, eager)
    model = tiny_gpt()
    got = train(model, thunder_ext.jit(model))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(dict(model.named_parameters()), dict(eager.named_parameters()))
