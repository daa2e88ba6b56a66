"""Rollout-vs-trainer consistency: teacher-forced logprobs of sampled tokens.

The reference every engine is held to: one fresh forward pass over prompt + output must give the
logprobs the engine reported for its sampled tokens (same weights, same temperature).
"""

from __future__ import annotations

from typing import Any

import torch


def teacher_forced_logprobs(
    model: Any, prompt_ids: list[int], output_ids: list[int], temperature: float = 1.0
) -> list[float]:
    """Logprobs of `output_ids` under `model` from one forward pass over prompt + output.

    Args:
        model: a causal LM returning `.logits` of shape `[1, T, V]`.
        prompt_ids: the prompt exactly as the engine received it.
        output_ids: the sampled tokens.
        temperature: the sampling temperature (use 1.0 for greedy).
    """
    if not output_ids:
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids + output_ids], device=device)
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float().cpu()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    picked = torch.gather(logprobs, 1, torch.tensor(output_ids)[:, None])[:, 0]
    return picked.tolist()


def max_abs_diff(a: list[float], b: list[float]) -> float:
    """Largest element-wise difference of two equally long sequences (0.0 when empty)."""
    if len(a) != len(b):
        raise ValueError(f"length mismatch: {len(a)} vs {len(b)}")
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
