"""A policy loss: REINFORCE with a clipped importance ratio.

A recipe names it with `trainer.algorithm.policy_loss: my_plugins.reinforce_loss:clipped_reinforce`;
the embedded trainer calls it once per micro-batch. For verl's workers, register it under a
name from a module they import (`register_for_verl("clipped_reinforce", clipped_reinforce)`)
and name that instead. `inputs.aggregate` applies the loss mask and the rollout-correction
weights; a loss that applies the weights itself is marked `@applies_is_weights`.
"""

from __future__ import annotations

import torch

from uni_agent_core.rl.losses import PolicyLossInputs, PolicyLossOutput


def clipped_reinforce(inputs: PolicyLossInputs) -> PolicyLossOutput:
    ratio = torch.exp(inputs.logprobs_B_T - inputs.old_logprobs_B_T)
    clipped = ratio.clamp(1 - inputs.clip_ratio_low, 1 + inputs.clip_ratio_high).detach()
    loss_B_T = -inputs.advantages_B_T * inputs.logprobs_B_T * clipped
    # aggregate keeps the sampled tokens and applies the rollout-correction weights
    sampled = inputs.loss_mask_B_T.bool()
    ratio_mean = float(ratio.detach()[sampled].mean()) if bool(sampled.any()) else 1.0
    return PolicyLossOutput(
        loss=inputs.aggregate(loss_B_T), metrics={"actor/reinforce_ratio_mean": ratio_mean}
    )
