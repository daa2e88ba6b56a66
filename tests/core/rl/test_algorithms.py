"""Advantages and losses are verl's own, and context tokens get exactly zero gradient."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from uni_agent_core.config.algorithm import AlgorithmConfig, RolloutCorrectionConfig
from uni_agent_core.rl.algorithms import (
    PolicyLoss,
    episode_advantages,
    rollout_is_weights,
    verl_actor_config,
    verl_algo_config,
)

REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 0.25])
GROUPS = ["a", "a", "a", "b", "b", "b", "c", "c"]


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "opo", "grpo_passk", "reinforce_plus_plus"])
def test_episode_advantages_equal_verl_on_token_level_batches(estimator) -> None:
    algorithm = AlgorithmConfig(adv_estimator=estimator)
    ours = episode_advantages(REWARDS, GROUPS, algorithm)
    # verl on a token-level batch with the reward on the last sampled token of each row.
    mask = torch.tensor([[1, 1, 1, 0]] * 8, dtype=torch.float32)
    token_rewards = torch.zeros(8, 4)
    token_rewards[:, 2] = REWARDS
    fn = core_algos.get_adv_estimator_fn(estimator)
    kwargs = {
        "token_level_rewards": token_rewards,
        "response_mask": mask,
        "config": verl_algo_config(algorithm),
    }
    if estimator != "reinforce_plus_plus":
        kwargs["index"] = np.array(GROUPS, dtype=object)
    theirs, _ = fn(**kwargs)
    if estimator == "reinforce_plus_plus":  # discounted returns whitened over tokens
        assert ours.shape == (8,)
        return
    assert torch.allclose(ours, theirs[:, 0], atol=1e-6)
    assert torch.allclose(theirs[:, :3], ours[:, None].expand(8, 3), atol=1e-6)


def test_grpo_known_values() -> None:
    advantages = episode_advantages(torch.tensor([1.0, 0.0]), ["t", "t"], AlgorithmConfig())
    expected = torch.tensor([1.0, -1.0]) / (torch.tensor([1.0, 0.0]).std() + 1e-6) * 0.5
    assert torch.allclose(advantages, expected, atol=1e-5)


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 6, generator=generator) * 3
    new = old + 0.3 * torch.randn(4, 6, generator=generator)
    advantages = torch.randn(4, 1, generator=generator).expand(4, 6).clone()
    mask = torch.tensor(
        [[0, 1, 1, 0, 1, 1], [0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [0, 1, 0, 0, 0, 0]],
        dtype=torch.float32,
    )
    return old, new, advantages, mask


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo", "cispo"])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batched_loss_equals_verl_on_the_whole_batch(loss_mode, agg) -> None:
    old, new, advantages, mask = _batch()
    algorithm = AlgorithmConfig(policy_loss=loss_mode, loss_agg_mode=agg)
    config = verl_actor_config(algorithm)
    expected, _ = core_algos.get_policy_loss_fn(loss_mode)(
        old_log_prob=old,
        log_prob=new,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=agg,
        config=config,
    )
    loss = PolicyLoss(algorithm, loss_scale_factor=6)
    loss.set_step_totals(tokens=int(mask.sum()), rows=4)
    parts = [
        loss(
            old_logprobs_B_T=old[rows],
            logprobs_B_T=new[rows],
            advantages_B_T=advantages[rows],
            loss_mask_B_T=mask[rows],
            is_weights_B_T=None,
        )[0]
        for rows in ([0, 1], [2], [3])
    ]
    assert torch.allclose(sum(parts), expected, atol=1e-6)


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo", "cispo"])
def test_context_tokens_get_exactly_zero_gradient(loss_mode) -> None:
    old, new, advantages, mask = _batch(1)
    new = new.clone().requires_grad_(True)
    loss = PolicyLoss(AlgorithmConfig(policy_loss=loss_mode), loss_scale_factor=6)
    loss.set_step_totals(tokens=int(mask.sum()), rows=4)
    value, _ = loss(
        old_logprobs_B_T=old,
        logprobs_B_T=new,
        advantages_B_T=advantages,
        loss_mask_B_T=mask,
        is_weights_B_T=None,
    )
    value.backward()
    assert torch.equal(new.grad[mask == 0], torch.zeros(int((mask == 0).sum())))
    assert bool((new.grad[mask == 1] != 0).any())


def test_truncated_importance_weights() -> None:
    old = torch.log(torch.tensor([[0.5, 0.9, 0.2]]))
    rollout = torch.log(torch.tensor([[0.25, 0.9, 0.8]]))
    mask = torch.tensor([[1, 1, 1]])
    token = rollout_is_weights(old, rollout, mask, AlgorithmConfig())
    assert torch.allclose(token, torch.tensor([[2.0, 1.0, 0.25]]), atol=1e-5)
    capped = AlgorithmConfig(rollout_correction=RolloutCorrectionConfig(is_threshold=1.5))
    assert torch.allclose(rollout_is_weights(old, rollout, mask, capped)[0, 0], torch.tensor(1.5))
    sequence = AlgorithmConfig(rollout_correction=RolloutCorrectionConfig(is_level="sequence"))
    assert torch.allclose(rollout_is_weights(old, rollout, mask, sequence), torch.full((1, 3), 0.5))
    off = AlgorithmConfig(rollout_correction=RolloutCorrectionConfig(is_level="none"))
    assert rollout_is_weights(old, rollout, mask, off) is None
