"""Hugging Face ``transformers``' ResNet (convolutions, BatchNorm in training) through thunder_ext.jit (issue 16): a
tiny random-initialised ``ResNetForImageClassification`` trained 3 steps with SGD (momentum) — losses, parameters,
BatchNorm running statistics and the optimizer's momentum buffers match eager. Skipped when transformers is not
installed (the ``models`` extra pins a version that installs next to litgpt and the pinned torch); nothing is
downloaded."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402

STEPS = 3
LABELS = 4


def tiny_resnet() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    transformers = pytest.importorskip("transformers")  # here, not at collection (seconds of CPU per process)
    torch.manual_seed(0)
    config = transformers.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                       layer_type="basic", num_labels=LABELS)
    model = transformers.ResNetForImageClassification(config).train()
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, forward) -> list[torch.Tensor]:
    losses = []
    for i in range(STEPS):
        gen = torch.Generator().manual_seed(i)
        images, labels = torch.randn(2, 3, 32, 32, generator=gen), torch.randint(0, LABELS, (2,), generator=gen)
        loss = torch.nn.functional.cross_entropy(forward(images).logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses


@pytest.mark.parametrize("executors", [
    pytest.param(["torch"], marks=pytest.mark.slow),  # ~10-18 s on 2 cores: CI runs every cell
    pytest.param(None, marks=pytest.mark.slow),
    pytest.param(["torchcompile"], marks=pytest.mark.slow),
], ids=["torch", "default", "torchcompile"])
def test_training_steps_match_eager(executors):
    eager, eager_optimizer = tiny_resnet()
    expected = train(eager, eager_optimizer, eager)
    model, optimizer = tiny_resnet()
    jitted = thunder_ext.jit(model) if executors is None else thunder_ext.jit(model, executors=executors)
    got = train(model, optimizer, jitted)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(dict(model.named_parameters()), dict(eager.named_parameters()))
    torch.testing.assert_close(dict(model.named_buffers()), dict(eager.named_buffers()))  # running stats, counts
    for p, q in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(optimizer.state[q]["momentum_buffer"], eager_optimizer.state[p]["momentum_buffer"])
    assert thunder.cache_misses(jitted) == 1
