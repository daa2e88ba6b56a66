"""The LM head: float32 logits from a bf16 projection with its largest logits recomputed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from uni_agent_core.models.lm_head import EXACT_TOP, head_logits, head_logprobs


def _head(vocab: int = 500, width: int = 32, seed: int = 0) -> torch.nn.Linear:
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(width, vocab, bias=False)
    with torch.no_grad():
        # logits of magnitude 10-30, where bf16 rounding reaches a few hundredths
        head.weight.copy_(torch.randn(vocab, width, generator=generator) * 1.5)
    return head.to(torch.bfloat16)


def _hidden(rows: int = 6, width: int = 32, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, width, generator=generator).to(torch.bfloat16)


def _float32_logits(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    return hidden.float() @ head.weight.float().t()


def test_the_largest_logits_are_float32_exact_and_the_rest_bf16_close() -> None:
    head, hidden = _head(), _hidden()
    logits, exact = head_logits(head, hidden), _float32_logits(head, hidden)
    assert logits.dtype == torch.float32
    top = exact.topk(EXACT_TOP, dim=-1).indices
    torch.testing.assert_close(logits.gather(-1, top), exact.gather(-1, top), rtol=1e-6, atol=1e-5)
    rounded = (logits - exact).abs().max()
    assert 0 < rounded <= exact.abs().max() * 2**-8  # the others: one bf16 rounding at most
    bf16_only = (head(hidden).float() - exact).gather(-1, top).abs().max()
    assert bf16_only > 1e-3  # what the recomputation removes


def test_logprobs_match_a_float32_head_and_so_do_their_gradients() -> None:
    head, hidden = _head(), _hidden()
    targets = _float32_logits(head, hidden).argmax(dim=-1)  # sampled tokens: high-probability
    targets[::2] = torch.arange(0, hidden.shape[0], 2) * 7  # and a few unlikely ones
    for temperature in (1.0, 0.7):
        h = hidden.detach().clone().requires_grad_(True)
        w = head.weight.detach().clone().requires_grad_(True)
        values = head_logprobs(_with_weight(w), h, targets, temperature)
        values.sum().backward()
        h32 = hidden.float().requires_grad_(True)
        w32 = head.weight.detach().float().requires_grad_(True)
        logits = h32 @ w32.t() / temperature
        expected = logits.gather(-1, targets[:, None])[:, 0] - logits.logsumexp(-1)
        expected.sum().backward()
        likely = values.detach().exp() > 0.5
        torch.testing.assert_close(values[likely], expected[likely], rtol=0, atol=2e-4)
        torch.testing.assert_close(values, expected, rtol=0, atol=0.1)
        for mine, exact in ((h.grad, h32.grad), (w.grad, w32.grad)):
            assert mine.dtype == torch.bfloat16
            error = (mine.float() - exact).norm() / exact.norm()
            assert error < 1e-2  # a bf16 gradient of the float32 one


def test_float32_hidden_states_keep_the_plain_float32_projection() -> None:
    head = _head().float()
    hidden = _hidden().float()
    assert torch.equal(head_logits(head, hidden), torch.nn.functional.linear(hidden, head.weight))


def test_a_head_with_a_bias_is_projected_in_float32() -> None:
    head = torch.nn.Linear(32, 50).to(torch.bfloat16)
    hidden = _hidden()
    expected = torch.nn.functional.linear(hidden.float(), head.weight.float(), head.bias.float())
    assert torch.equal(head_logits(head, hidden), expected)


@pytest.mark.parametrize("vocab", [3, EXACT_TOP])
def test_a_vocabulary_no_larger_than_the_exact_top_is_all_exact(vocab: int) -> None:
    head, hidden = _head(vocab=vocab), _hidden()
    torch.testing.assert_close(head_logits(head, hidden), _float32_logits(head, hidden))


def _with_weight(weight: torch.Tensor) -> SimpleNamespace:
    """A bias-free head around the test's own leaf tensor (its `.grad` is what is checked)."""
    return SimpleNamespace(weight=weight, bias=None)
