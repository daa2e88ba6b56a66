"""Token sampling with per-request temperature, top-p, top-k and seeds, plus the sampled logprob.

The reported logprob is `log_softmax(logits / T)` of the sampled token (T = 1 for greedy), i.e.
what a trainer computes with the same temperature on a teacher-forced forward pass. Top-p and
top-k shape which token is drawn but not the reported logprob: a trainer cannot reproduce the
truncation, and the importance-sampling correction between rollout and trainer logprobs is
computed downstream.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one sequence."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _filtered_probs(scaled: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """Probabilities of one row after top-k then top-p truncation (renormalised)."""
    logits = scaled
    if top_k > 0 and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        # Keep the smallest set whose mass reaches top_p (the first token is always kept).
        drop_sorted = (cumulative - sorted_probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum()
    return probs


def sample_tokens(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> tuple[list[int], list[float]]:
    """Sample one token per row.

    Args:
        logits: `[B, V]` next-token logits (any float dtype; computed in float32).
        params: sampling settings per row.
        generators: a seeded generator per row, or None for the global RNG.

    Returns:
        `(token_ids, logprobs)`, one of each per row.
    """
    # Sampling runs on the CPU whatever the model's device: seeded CPU generators then give the
    # same draws on every machine, and `[B, V]` logits are small next to a forward pass.
    logits = logits.float().cpu()
    temperatures = torch.tensor(
        [p.temperature if not p.greedy else 1.0 for p in params], dtype=torch.float32
    )
    scaled = logits / temperatures[:, None]
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    tokens: list[int] = torch.argmax(scaled, dim=-1).tolist()
    for row, p in enumerate(params):
        if not p.greedy:
            probs = _filtered_probs(scaled[row], p.top_p, p.top_k)
            tokens[row] = int(torch.multinomial(probs, 1, generator=generators[row]).item())
    index = torch.tensor(tokens, dtype=torch.long)[:, None]
    picked = torch.gather(logprobs_all, 1, index)[:, 0]
    return tokens, picked.tolist()
