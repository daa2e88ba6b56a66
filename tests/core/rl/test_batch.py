"""trajectories_to_batch: padding, alignment of masks, logprobs and versions."""

from __future__ import annotations

import math

import pytest
import torch

from uni_agent_core.rl.batch import trajectories_to_batch
from uni_agent_core.types import Trajectory


def _trajectory(chain_id: int, prompt: list[int], response: list[int], mask: list[int], **kw):
    return Trajectory(
        session_id="s",
        chain_id=chain_id,
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        logprobs=[-0.5 if m else 0.0 for m in mask],
        policy_versions=[3 if m else -1 for m in mask],
        **kw,
    )


def test_rows_are_right_padded_and_aligned_to_tokens() -> None:
    a = _trajectory(0, [1, 2, 3], [10, 11, 12, 13], [1, 1, 0, 1], reward=1.0)
    b = _trajectory(1, [1, 2], [20], [1])
    batch = trajectories_to_batch([a, b], pad_token_id=0)
    assert batch.input_ids_B_T.tolist() == [[1, 2, 3, 10, 11, 12, 13], [1, 2, 20, 0, 0, 0, 0]]
    assert batch.attention_mask_B_T.tolist() == [[1] * 7, [1, 1, 1, 0, 0, 0, 0]]
    assert batch.loss_mask_B_T.tolist() == [[0, 0, 0, 1, 1, 0, 1], [0, 0, 1, 0, 0, 0, 0]]
    assert batch.rollout_logprobs_B_T[0].tolist() == [0, 0, 0, -0.5, -0.5, 0, -0.5]
    assert batch.policy_versions_B_T[1].tolist() == [-1, -1, 3, -1, -1, -1, -1]
    assert batch.prompt_lengths_B.tolist() == [3, 2]
    assert batch.rewards_B[0].item() == 1.0 and math.isnan(batch.rewards_B[1].item())
    # Every trainable position holds the token the engine sampled.
    sampled = batch.input_ids_B_T[batch.loss_mask_B_T.bool()].tolist()
    assert sampled == [10, 11, 13, 20]
    assert batch.input_ids_B_T.dtype == torch.long


def test_rows_longer_than_max_length_are_refused() -> None:
    a = _trajectory(7, [1, 2, 3], [4, 5], [1, 1])
    with pytest.raises(ValueError, match=r"\(chain 7\) has 5 tokens"):
        trajectories_to_batch([a], pad_token_id=0, max_length=4)
    with pytest.raises(ValueError, match="at least one"):
        trajectories_to_batch([], pad_token_id=0)
