"""A user's own policy loss and advantage estimator: their typed inputs and outputs.

A recipe names one by import path (`algorithm.policy_loss: my_pkg.losses:clipped_pg`,
`algorithm.adv_estimator: my_pkg.advantages:rank_based`); `uni_agent_core.plugins` resolves
it. A loss is `loss(inputs: PolicyLossInputs, **options) -> PolicyLossOutput`, its options the
recipe's `algorithm.policy_loss_options`; an estimator is `estimate(inputs: AdvantageInputs) ->
Tensor` (one advantage per episode).

The framework owns two parts of every loss: `PolicyLossInputs.aggregate` keeps only sampled
tokens (the loss mask) and scales each token's loss by its rollout-correction weight, as verl's
built-in losses do. A loss that applies the weights itself says so with `@applies_is_weights`,
and `aggregate` leaves them out. `rl/loss_contract.py` checks both on a probe batch before a
run starts.

`verl_policy_loss` wraps a loss in verl's policy-loss signature. The embedded trainer calls
every loss through that signature (verl's built-ins and a user's alike), and the same wrapper
registers a user's loss for verl's workers (`register_for_verl`, `docs/extending.md`), so one
function trains in both backends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from uni_agent_core.config.algorithm import AlgorithmConfig

VerlPolicyLoss = Callable[..., tuple[torch.Tensor, dict[str, Any]]]
"""verl's policy-loss signature: `(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights) -> (loss, metrics)`."""


@dataclass(frozen=True)
class PolicyLossInputs:
    """One micro-batch of the step's rows, right-aligned response tokens (`B` rows, `T`
    tokens), and how the step's loss is normalised."""

    old_logprobs_B_T: torch.Tensor
    """Log-probabilities of the sampled tokens under the policy at the start of the step."""
    logprobs_B_T: torch.Tensor
    """The same under the current weights (carries the gradient)."""
    advantages_B_T: torch.Tensor
    """Each row's episode advantage, broadcast over its tokens."""
    loss_mask_B_T: torch.Tensor
    """1.0 on sampled tokens, 0.0 on context and padding."""
    is_weights_B_T: torch.Tensor | None
    """Truncated importance weights of the rollout correction, or None when it is off."""
    loss_agg_mode: str
    """The recipe's `algorithm.loss_agg_mode`."""
    clip_ratio_low: float
    clip_ratio_high: float
    batch_info: Mapping[str, Any] = field(default_factory=dict)
    """The whole step's totals (`batch_num_tokens`, `global_batch_size`, `dp_size`,
    `loss_scale_factor`), so that micro-batch losses add up to the step's loss."""
    weigh_in_aggregate: bool = True
    """Whether `aggregate` scales per-token losses by `is_weights_B_T` (False for a loss marked
    `@applies_is_weights`, which scales them itself)."""

    def aggregate(self, loss_B_T: torch.Tensor) -> torch.Tensor:
        """Per-token losses reduced to this micro-batch's share of the step's loss, as
        `loss_agg_mode` says (verl's `agg_loss`: `token-mean` divides by the step's sampled
        tokens, not the micro-batch's). Only sampled tokens count (`loss_mask_B_T`), and each
        is scaled by its rollout-correction weight unless the loss applies the weights itself.
        """
        from verl.trainer.ppo.core_algos import agg_loss

        if self.weigh_in_aggregate and self.is_weights_B_T is not None:
            loss_B_T = loss_B_T * self.is_weights_B_T
        return agg_loss(
            loss_mat=loss_B_T,
            loss_mask=self.loss_mask_B_T,
            loss_agg_mode=self.loss_agg_mode,
            **dict(self.batch_info),
        )


@dataclass(frozen=True)
class PolicyLossOutput:
    """What a loss returns."""

    loss: torch.Tensor
    """A scalar: this micro-batch's share of the step's loss (`PolicyLossInputs.aggregate`)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Logged with the step (`actor/...` names are conventional)."""


UserPolicyLoss = Callable[..., PolicyLossOutput]
"""`loss(inputs: PolicyLossInputs, **options) -> PolicyLossOutput`."""

_APPLIES_IS_WEIGHTS = "__agent_rl_applies_is_weights__"


def applies_is_weights(loss: UserPolicyLoss) -> UserPolicyLoss:
    """Mark `loss` as scaling its per-token losses by `inputs.is_weights_B_T` itself, so that
    `inputs.aggregate` does not scale them again (`rl/loss_contract.py` checks that it does)."""
    setattr(loss, _APPLIES_IS_WEIGHTS, True)
    return loss


def declares_is_weights(loss: UserPolicyLoss) -> bool:
    """Whether `loss` was marked `@applies_is_weights`."""
    return bool(getattr(loss, _APPLIES_IS_WEIGHTS, False))


@dataclass(frozen=True)
class AdvantageInputs:
    """A step's episodes: one outcome reward each, and the GRPO group each was launched in."""

    rewards_E: torch.Tensor
    group_ids: Sequence[str]
    algorithm: AlgorithmConfig


UserAdvantageEstimator = Callable[[AdvantageInputs], torch.Tensor]


def verl_policy_loss(
    loss: UserPolicyLoss, options: Mapping[str, Any] | None = None
) -> VerlPolicyLoss:
    """`loss` in verl's policy-loss signature (for the embedded trainer and verl's registry),
    called with the recipe's `options` as keyword arguments.

    Raises (when called):
        TypeError: `loss` returned something that is not a `PolicyLossOutput` with a scalar.
    """
    keywords = dict(options or {})
    weighs_itself = declares_is_weights(loss)

    def verl_signature(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,  # verl's ActorConfig; both backends pass one
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        inputs = PolicyLossInputs(
            old_logprobs_B_T=old_log_prob,
            logprobs_B_T=log_prob,
            advantages_B_T=advantages,
            loss_mask_B_T=response_mask,
            is_weights_B_T=rollout_is_weights,
            loss_agg_mode=loss_agg_mode,
            clip_ratio_low=float(config.clip_ratio_low),
            clip_ratio_high=float(config.clip_ratio_high),
            batch_info=dict(config.global_batch_info),
            weigh_in_aggregate=not weighs_itself,
        )
        output = loss(inputs, **keywords)
        if not isinstance(output, PolicyLossOutput) or output.loss.dim() != 0:
            raise TypeError(
                f"policy loss {getattr(loss, '__qualname__', loss)!r} must return a "
                "PolicyLossOutput with a scalar loss (uni_agent_core.rl.losses), got "
                f"{type(output).__name__}"
            )
        return output.loss, dict(output.metrics)

    verl_signature.__qualname__ = getattr(loss, "__qualname__", "user_policy_loss")
    return verl_signature


def register_for_verl(
    name: str, loss: UserPolicyLoss, options: Mapping[str, Any] | None = None
) -> None:
    """Register `loss` in verl's policy-loss registry as `name`, so that verl's workers run it
    with `actor.policy_loss.loss_mode=<name>` (call it in a module the workers import); verl's
    workers pass no options, so give them here."""
    from verl.trainer.ppo.core_algos import register_policy_loss

    register_policy_loss(name)(verl_policy_loss(loss, options))
