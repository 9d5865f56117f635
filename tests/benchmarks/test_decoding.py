"""The decoding benchmark's "tokens and cache = eager" column can say False, and its greedy loop feeds each chosen
token back at the next position (the prompt first)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("thunder")

from benchmarks import decoding  # noqa: E402


def test_equal_sees_a_different_cache() -> None:
    tokens, cache = torch.tensor([[1, 2]]), [torch.zeros(2)]
    assert decoding._equal((tokens, cache), (tokens.clone(), [torch.zeros(2)]))
    assert not decoding._equal((tokens, cache), (tokens, [torch.ones(2)]))


def test_greedy_feeds_back_the_argmax_at_each_position() -> None:
    seen = []

    def step(ids: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        seen.append((ids.shape[-1], where.tolist()))
        logits = torch.zeros(1, ids.shape[-1], decoding.VOCAB)
        logits[0, -1, len(seen)] = 1.0  # the n-th call chooses token n
        return logits

    chosen, times = decoding._greedy(step, 3)
    assert chosen.tolist() == [[1, 2, 3]] and len(times) == 3
    assert seen == [(decoding.PROMPT, list(range(decoding.PROMPT))), (1, [decoding.PROMPT]), (1, [decoding.PROMPT + 1])]
