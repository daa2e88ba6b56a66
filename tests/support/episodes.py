"""Crafted trainer inputs: a trajectory whose rollout logprobs are the policy's own."""

from __future__ import annotations

import torch

from uni_agent_core.rl.logprobs import token_logprobs
from uni_agent_core.types import Trajectory


def scored_trajectory(
    model, session_id: str, prompt: list[int], response: list[int], mask: list[int], version: int
) -> Trajectory:
    """`prompt + response` with the model's logprobs on the sampled (`mask` 1) tokens, as an
    engine at policy `version` would have recorded them."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logprobs = token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) :].tolist()
    return Trajectory(
        session_id=session_id,
        chain_id=0,
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        logprobs=[lp if m else 0.0 for lp, m in zip(logprobs, mask, strict=True)],
        policy_versions=[version if m else -1 for m in mask],
    )
