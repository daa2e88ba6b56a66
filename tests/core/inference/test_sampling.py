"""Sampling: truncation rules and the reported logprob."""

from __future__ import annotations

import torch

from uni_agent_core.inference.sampling import SamplingParams, _filtered_probs, sample_tokens


def test_top_k_and_top_p_keep_the_expected_support() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert (_filtered_probs(logits, 1.0, 2) > 0).tolist() == [True, True, False, False]
    assert (_filtered_probs(logits, 0.8, -1) > 0).tolist() == [True, True, False, False]
    assert (_filtered_probs(logits, 0.81, -1) > 0).tolist() == [True, True, True, False]
    assert torch.isclose(_filtered_probs(logits, 0.5, -1).sum(), torch.tensor(1.0))


def test_reported_logprob_is_at_the_sampling_temperature() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.5)]
    generator = torch.Generator().manual_seed(0)
    tokens, logprobs = sample_tokens(logits, params, [None, generator])
    assert tokens[0] == 0
    assert abs(logprobs[0] - torch.log_softmax(logits[0], -1)[0].item()) < 1e-6
    expected = torch.log_softmax(logits[1] / 0.5, -1)[tokens[1]].item()
    assert abs(logprobs[1] - expected) < 1e-6


def test_seeded_generators_reproduce_samples() -> None:
    logits = torch.zeros(1, 1000)
    params = [SamplingParams(temperature=1.0)]
    draws = [
        sample_tokens(logits, params, [torch.Generator().manual_seed(42)])[0][0] for _ in range(3)
    ]
    assert len(set(draws)) == 1
