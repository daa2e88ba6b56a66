"""Padded training tensors from trajectories (the trainer's view of gateway chains).

Each trajectory becomes one right-padded row `prompt_ids + response_ids`. Per-token tensors are
aligned to the *token* they describe (position t holds token t's mask, rollout logprob and
policy version); a trainer that predicts token t from position t-1 shifts logits, not these.
Shape suffixes: B rows, T tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from uni_agent_core.types import Trajectory


@dataclass(frozen=True)
class TrajectoryBatch:
    """Right-padded tensors of a list of trajectories."""

    input_ids_B_T: torch.Tensor
    attention_mask_B_T: torch.Tensor
    """1 on real tokens (prompt and response), 0 on padding."""
    loss_mask_B_T: torch.Tensor
    """1 exactly on tokens the engine sampled for the row's chain."""
    rollout_logprobs_B_T: torch.Tensor
    """The engine's logprob of each sampled token; 0.0 elsewhere."""
    policy_versions_B_T: torch.Tensor
    """Weight version of each sampled token; -1 elsewhere (context, prompt, padding)."""
    prompt_lengths_B: torch.Tensor
    rewards_B: torch.Tensor
    """Reward per row (NaN where the trajectory has none yet)."""

    @property
    def size(self) -> int:
        return int(self.input_ids_B_T.shape[0])


def trajectories_to_batch(
    trajectories: Sequence[Trajectory], *, pad_token_id: int, max_length: int | None = None
) -> TrajectoryBatch:
    """Stack trajectories into right-padded tensors.

    Args:
        trajectories: rows, in order.
        pad_token_id: id written into padding positions (masked out everywhere).
        max_length: refuse rows longer than this (a silent cut would drop sampled tokens).

    Raises:
        ValueError: no trajectories, or a row longer than `max_length`.
    """
    if not trajectories:
        raise ValueError("trajectories_to_batch needs at least one trajectory")
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in trajectories]
    width = max(lengths)
    if max_length is not None and width > max_length:
        worst = lengths.index(width)
        raise ValueError(
            f"trajectory {worst} (chain {trajectories[worst].chain_id}) has {width} tokens, "
            f"more than max_length={max_length}; raise the limit or cap the chain capacity"
        )
    rows = len(trajectories)
    input_ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.long)
    logprobs = torch.zeros((rows, width), dtype=torch.float32)
    versions = torch.full((rows, width), -1, dtype=torch.long)
    for row, trajectory in enumerate(trajectories):
        p, n = len(trajectory.prompt_ids), lengths[row]
        input_ids[row, :n] = torch.tensor(trajectory.prompt_ids + trajectory.response_ids)
        attention[row, :n] = 1
        loss_mask[row, p:n] = torch.tensor(trajectory.loss_mask, dtype=torch.long)
        logprobs[row, p:n] = torch.tensor(trajectory.logprobs, dtype=torch.float32)
        versions[row, p:n] = torch.tensor(trajectory.policy_versions, dtype=torch.long)
    rewards = torch.tensor(
        [float("nan") if t.reward is None else t.reward for t in trajectories],
        dtype=torch.float32,
    )
    prompt_lengths = torch.tensor([len(t.prompt_ids) for t in trajectories], dtype=torch.long)
    return TrajectoryBatch(
        input_ids, attention, loss_mask, logprobs, versions, prompt_lengths, rewards
    )
