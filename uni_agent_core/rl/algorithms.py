"""Advantages and policy losses, taken from verl's `core_algos` registries.

agent-rl does not re-implement RL math: `episode_advantages` calls verl's advantage estimator
(`get_adv_estimator_fn`) on one outcome reward per episode, grouped by the GRPO group each
episode was launched in, and
`PolicyLoss` calls verl's policy loss (`get_policy_loss_fn`: vanilla PPO clip, gspo, cispo,
...) with a verl `ActorConfig` built from the recipe. What is ours is the batch around them:
advantages are computed per *episode* (one sample of a task) and broadcast to every chain the
gateway recorded for it (a split session has several chains, all sharing the episode's
outcome), and `rollout_is_weights` gives truncated importance weights between the engine's
(rollout) logprobs and the trainer's at the start of the step (rollout correction).

verl is imported lazily (importing it takes seconds).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from uni_agent_core.config.algorithm import AlgorithmConfig
from uni_agent_core.plugins import is_user_plugin, resolve
from uni_agent_core.rl.losses import AdvantageInputs, verl_policy_loss


def verl_algo_config(algorithm: AlgorithmConfig) -> Any:
    """verl's `AlgoConfig` for the estimator (only the fields advantage functions read)."""
    from verl.trainer.config import AlgoConfig

    estimator = algorithm.adv_estimator
    return AlgoConfig(
        adv_estimator="grpo" if is_user_plugin("adv_estimator", estimator) else estimator,
        norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std,
        gamma=1.0,
        lam=1.0,
    )


def verl_actor_config(algorithm: AlgorithmConfig) -> Any:
    """verl's `ActorConfig` carrying the clip ranges and loss mode the policy losses read."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=1,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=1,
        clip_ratio=algorithm.clip_ratio_low,
        clip_ratio_low=algorithm.clip_ratio_low,
        clip_ratio_high=algorithm.clip_ratio_high,
        clip_ratio_c=algorithm.clip_ratio_c,
        loss_agg_mode=algorithm.loss_agg_mode,
        policy_loss=PolicyLossConfig(
            loss_mode=(
                "vanilla"
                if is_user_plugin("policy_loss", algorithm.policy_loss)
                else algorithm.policy_loss
            )
        ),
    )


def episode_advantages(
    rewards_E: torch.Tensor, group_ids: Sequence[str], algorithm: AlgorithmConfig
) -> torch.Tensor:
    """One advantage per episode from verl's estimator (or the recipe's own, by import path),
    episodes grouped by `group_ids`.

    Args:
        rewards_E: outcome reward of each episode.
        group_ids: the GRPO group of each episode (`RolloutResult.group_key`).
        algorithm: the recipe's algorithm section.

    Returns:
        Advantages, shape (E,).
    """
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    if len(group_ids) != rewards_E.shape[0]:
        raise ValueError(f"{len(group_ids)} group ids for {rewards_E.shape[0]} rewards")
    if is_user_plugin("adv_estimator", algorithm.adv_estimator):
        return _user_advantages(rewards_E, group_ids, algorithm)
    estimator = get_adv_estimator_fn(algorithm.adv_estimator)
    accepted = inspect.signature(estimator).parameters
    kwargs: dict[str, Any] = {
        "token_level_rewards": rewards_E.to(torch.float32).unsqueeze(-1),
        "response_mask": torch.ones((rewards_E.shape[0], 1), dtype=torch.float32),
        "config": verl_algo_config(algorithm),
    }
    if "index" in accepted:
        kwargs["index"] = np.array(list(group_ids), dtype=object)
    if "norm_adv_by_std_in_grpo" in accepted:
        kwargs["norm_adv_by_std_in_grpo"] = algorithm.norm_adv_by_std
    advantages, _ = estimator(**kwargs)
    return advantages[:, 0]


def _user_advantages(
    rewards_E: torch.Tensor, group_ids: Sequence[str], algorithm: AlgorithmConfig
) -> torch.Tensor:
    estimate = resolve("adv_estimator", algorithm.adv_estimator)
    advantages = estimate(AdvantageInputs(rewards_E.to(torch.float32), group_ids, algorithm))
    if not isinstance(advantages, torch.Tensor) or advantages.shape != rewards_E.shape:
        raise TypeError(
            f"advantage estimator {algorithm.adv_estimator} must return a tensor of shape "
            f"{tuple(rewards_E.shape)} (one advantage per episode), got "
            f"{getattr(advantages, 'shape', type(advantages).__name__)}"
        )
    return advantages.to(torch.float32)


def rollout_is_weights(
    old_logprobs_B_T: torch.Tensor,
    rollout_logprobs_B_T: torch.Tensor,
    loss_mask_B_T: torch.Tensor,
    algorithm: AlgorithmConfig,
) -> torch.Tensor | None:
    """Truncated importance weights `min(pi_old / pi_rollout, threshold)` (detached).

    `token` level weighs each sampled token; `sequence` level uses the product over a row's
    sampled tokens. None when the correction is off or in bypass mode (old == rollout).
    """
    correction = algorithm.rollout_correction
    if correction.is_level == "none" or correction.bypass_mode:
        return None
    mask = loss_mask_B_T.to(old_logprobs_B_T.dtype)
    log_ratio = (old_logprobs_B_T - rollout_logprobs_B_T) * mask
    if correction.is_level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(mask)
    weights = torch.exp(torch.clamp(log_ratio, max=float(np.log(correction.is_threshold))))
    return (weights * mask).detach()


def is_weight_metrics(
    weights_B_T: torch.Tensor | None, loss_mask_B_T: torch.Tensor, algorithm: AlgorithmConfig
) -> dict[str, float]:
    """How much truncated importance sampling corrects a step: `train/tis_*` metrics of the
    step's `rollout_is_weights`.

    `weight_mean` and `weight_std` over sampled tokens (1.0 and 0.0 when trainer and engine
    agree exactly), `clipped_frac` the share of tokens whose weight hit `is_threshold`, and
    `far_frac` the share whose weight is off 1 by more than 10% either way. Empty when there
    are no weights (the correction is off or in bypass mode).
    """
    sampled = loss_mask_B_T.bool()
    if weights_B_T is None or not bool(sampled.any()):
        return {}
    values = weights_B_T[sampled].double()
    threshold = algorithm.rollout_correction.is_threshold
    return {
        "train/tis_weight_mean": float(values.mean()),
        "train/tis_weight_std": float(values.std()) if values.numel() > 1 else 0.0,
        "train/tis_weight_min": float(values.min()),
        "train/tis_clipped_frac": float((values >= threshold * (1 - 1e-6)).double().mean()),
        "train/tis_far_frac": float(((values - 1).abs() > 0.1).double().mean()),
    }


class PolicyLoss:
    """verl's policy loss for the recipe (or the recipe's own, by import path, through the
    same signature: `rl/losses.py`), normalised over a whole step's batch.

    `set_step_totals` must be called once per step with the batch's sampled-token and row
    counts, so that micro-batch losses sum to the loss of the whole batch (gradient
    accumulation then equals one big batch).
    """

    def __init__(self, algorithm: AlgorithmConfig, *, loss_scale_factor: int) -> None:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        self.algorithm = algorithm
        self.config = verl_actor_config(algorithm)
        name = algorithm.policy_loss
        self.loss_fn = (
            verl_policy_loss(resolve("policy_loss", name), algorithm.policy_loss_options)
            if is_user_plugin("policy_loss", name)
            else get_policy_loss_fn(name)
        )
        self.loss_scale_factor = loss_scale_factor

    def set_step_totals(self, *, tokens: int, rows: int) -> None:
        self.config.global_batch_info.clear()
        self.config.global_batch_info.update(
            {
                "dp_size": 1,
                "batch_num_tokens": max(tokens, 1),
                "global_batch_size": max(rows, 1),
                "loss_scale_factor": self.loss_scale_factor,
            }
        )

    def __call__(
        self,
        *,
        old_logprobs_B_T: torch.Tensor,
        logprobs_B_T: torch.Tensor,
        advantages_B_T: torch.Tensor,
        loss_mask_B_T: torch.Tensor,
        is_weights_B_T: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        if "batch_num_tokens" not in self.config.global_batch_info:
            raise RuntimeError("PolicyLoss.set_step_totals must be called before the loss")
        return self.loss_fn(
            old_log_prob=old_logprobs_B_T,
            log_prob=logprobs_B_T,
            advantages=advantages_B_T,
            response_mask=loss_mask_B_T.to(logprobs_B_T.dtype),
            loss_agg_mode=self.algorithm.loss_agg_mode,
            config=self.config,
            rollout_is_weights=is_weights_B_T,
        )
