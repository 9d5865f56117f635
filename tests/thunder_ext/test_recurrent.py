"""Recurrent layers trained through ``thunder_ext.jit`` (issue 23): ``nn.LSTM``, ``nn.GRU``, ``nn.RNN`` and the cells.

Their ops (``torch.lstm``, ``gru``, ``rnn_tanh``/``rnn_relu`` and the ``*_cell`` ops) are Thunder's automatically
registered torch ops, differentiated by recomputing them under torch autograd; two general fixes make a training
step of them match eager: a weak reference's tensor referent is the proxy the trace holds
(:mod:`thunder_ext.python_state.referents`: ``RNNBase._weights_have_changed`` compares ``ref() is weight``), and the
gradients of tensors nested in list arguments (the weight list, an LSTM's ``(h0, c0)``) are put on them
(:func:`thunder_ext.eager.grad_fixes.flat_joint`). Each case runs eager and the jitted module on identical copies
for three steps (the first call, then cache hits), an SGD step between calls, and compares the outputs and hidden
states, the gradients of the input, the initial state and every parameter, and the parameters after the step. An LSTM
and an LSTM cell on the torch executor run by default (interpreting ``RNNBase.forward`` costs seconds per
compilation); GRU, RNN, the other cells, the default executors, torch.compile (one fusion type per case,
alternating) and the wider variants are ``slow``.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder_ext.python_state.referents import WeakReferenceToTensorError  # noqa: E402

from executor_configs import CALLS, CONFIGS  # noqa: E402

BATCH, STEPS, FEATURES, HIDDEN = 2, 4, 3, 5


@dataclass(frozen=True)
class Case:
    """A recurrent module, its input's shape and its initial state's shapes (``None``: no initial state)."""

    module: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    state_shapes: tuple[tuple[int, ...], ...] | None
    eval: bool = False

    def inputs(self) -> tuple[torch.Tensor, object]:
        x = torch.randn(self.input_shape, requires_grad=True)
        if self.state_shapes is None:
            return x, None
        states = tuple(torch.randn(s, requires_grad=True) for s in self.state_shapes)
        return x, states if len(states) > 1 else states[0]


CASES = {
    "lstm": Case(lambda: nn.LSTM(FEATURES, HIDDEN, batch_first=True), (BATCH, STEPS, FEATURES),
                 ((1, BATCH, HIDDEN), (1, BATCH, HIDDEN))),
    "lstm_cell": Case(lambda: nn.LSTMCell(FEATURES, HIDDEN), (BATCH, FEATURES), ((BATCH, HIDDEN), (BATCH, HIDDEN))),
}
"""The default cells (the torch executor): a layer and a cell."""
WIDE = {
    "gru": Case(lambda: nn.GRU(FEATURES, HIDDEN), (STEPS, BATCH, FEATURES), ((1, BATCH, HIDDEN),)),
    "rnn": Case(lambda: nn.RNN(FEATURES, HIDDEN, nonlinearity="relu"), (STEPS, BATCH, FEATURES),
                ((1, BATCH, HIDDEN),)),
    "lstm_bidirectional_2_layers": Case(lambda: nn.LSTM(FEATURES, HIDDEN, num_layers=2, bidirectional=True),
                                        (STEPS, BATCH, FEATURES), ((4, BATCH, HIDDEN), (4, BATCH, HIDDEN))),
    "lstm_no_state": Case(lambda: nn.LSTM(FEATURES, HIDDEN, batch_first=True), (BATCH, STEPS, FEATURES), None),
    "gru_dropout_eval": Case(lambda: nn.GRU(FEATURES, HIDDEN, num_layers=2, dropout=0.5), (STEPS, BATCH, FEATURES),
                             ((2, BATCH, HIDDEN),), eval=True),
    "rnn_tanh_unbatched": Case(lambda: nn.RNN(FEATURES, HIDDEN, batch_first=True), (STEPS, FEATURES), None),
    "gru_cell": Case(lambda: nn.GRUCell(FEATURES, HIDDEN), (BATCH, FEATURES), ((BATCH, HIDDEN),)),
    "rnn_cell": Case(lambda: nn.RNNCell(FEATURES, HIDDEN), (BATCH, FEATURES), ((BATCH, HIDDEN),)),
}


def _tensors(value: object) -> list[torch.Tensor]:
    """The tensors of an output or state, nested tuples flattened in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in (value if isinstance(value, (tuple, list)) else ()) for t in _tensors(v)]


def _detached(state: object) -> object:
    if isinstance(state, tuple):
        return tuple(t.detach().clone().requires_grad_() for t in state)
    return None if state is None else state.detach().clone().requires_grad_()  # type: ignore[union-attr]


def _step(module: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, state: object) -> list[torch.Tensor]:
    """One training step: forward, a loss weighting every output differently, ``backward()``; the outputs and the
    gradients of the input, the initial state and the parameters; then the optimizer's step."""
    outs = _tensors(module(x) if state is None else module(x, state))
    sum((o * (i + 1)).sum() for i, o in enumerate(outs)).backward()
    grads = [x.grad, *(t.grad for t in _tensors(state)), *(p.grad for p in module.parameters())]
    opt.step()
    opt.zero_grad()
    return [o.detach() for o in outs] + grads + [p.detach().clone() for p in module.parameters()]


def check_training(case: Case, config: dict[str, object]) -> None:
    torch.manual_seed(0)
    eager = case.module()
    module = copy.deepcopy(eager)
    if case.eval:
        eager.eval(), module.eval()
    jitted = thunder_ext.jit(module, **config)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(CALLS):
        x, state = case.inputs()
        expected = _step(eager, eager_opt, x.detach().clone().requires_grad_(), _detached(state))
        got = _step(jitted, opt, x, state)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert g is not None and e is not None
            torch.testing.assert_close(g, e)
    assert thunder.cache_misses(jitted) == 1 and thunder.cache_hits(jitted) == CALLS - 1


@pytest.mark.parametrize("name", CASES)
def test_recurrent_training_matches_eager(name: str) -> None:
    check_training(CASES[name], CONFIGS["torch"])


@pytest.mark.slow
@pytest.mark.parametrize("name,config", [  # the default executors, and one torch.compile fusion type, alternating
    (name, config) for k, name in enumerate([*CASES, *WIDE])
    for config in ("default", ("torchcompile-consecutive", "torchcompile-dataflow")[k % 2])])
def test_recurrent_training_matches_eager_wide(name: str, config: str) -> None:
    check_training({**CASES, **WIDE}[name], CONFIGS[config])


@pytest.mark.slow
@pytest.mark.parametrize("name", WIDE)
def test_recurrent_variants_on_torch(name: str) -> None:
    check_training(WIDE[name], CONFIGS["torch"])


class _Holder:
    def __init__(self, t: torch.Tensor) -> None:
        self.ref = weakref.ref(t)


def test_a_weak_referents_identity_is_eagers_and_guarded() -> None:
    """``ref() is t`` answers as eager, and a later call whose reference points elsewhere takes the other branch."""

    def f(holder: _Holder, t: torch.Tensor) -> torch.Tensor:
        return t * 2 if holder.ref() is t else t * 3

    jf = thunder_ext.jit(f)
    t, u = torch.randn(3), torch.randn(3)
    same, other = _Holder(t), _Holder(u)
    for holder in (same, same, other, same):
        torch.testing.assert_close(jf(holder, t), f(holder, t))
    assert thunder.cache_misses(jf) == 2


def test_a_weak_reference_to_a_traced_tensor_is_refused() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        weakref.ref(x)
        return x * 2

    with pytest.raises(WeakReferenceToTensorError, match=r"weakref\.ref\(.*outside the jitted function"):
        thunder_ext.jit(f)(torch.randn(3))
