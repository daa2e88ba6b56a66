"""The contract every policy loss keeps, checked on a probe batch before a run starts.

A user's loss (`rl/losses.py`) trains next to verl's built-ins, which keep two rules that a
hand-written loss can silently break:

- **The loss mask.** Context and padding tokens (`loss_mask_B_T == 0`) carry no gradient.
- **The rollout correction.** Each sampled token's loss is scaled by its truncated importance
  weight (`is_weights_B_T`), exactly once: by `inputs.aggregate`, or by the loss itself when it
  is marked `@applies_is_weights`.

`check_policy_loss` calls the loss, wrapped as the trainer wraps it, on a small batch whose
ratios are 1 (nothing is clipped) and reads its gradient: zero on masked tokens, and on one
sampled token, half the gradient when its weight is halved. Both are properties of the per-token
losses, so they hold for any `loss_agg_mode` and any loss that is linear in each token's loss
before aggregation (PPO-style clipping, REINFORCE, CISPO). A loss whose probe gradient is zero
there cannot be judged, and passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import torch

from uni_agent_core.rl.losses import UserPolicyLoss, declares_is_weights, verl_policy_loss

_OLD_LOGPROBS_B_T = ((-1.0, -2.0, -0.5, -1.5), (-0.7, -1.2, -2.2, -0.9))
_ADVANTAGES_B = (1.0, -1.0)
_LOSS_MASK_B_T = ((1.0, 1.0, 0.0, 0.0), (1.0, 1.0, 1.0, 1.0))
_WEIGHED_TOKEN = (1, 2)
"""The sampled token whose rollout-correction weight the probe halves."""


def check_policy_loss(
    loss: UserPolicyLoss, options: Mapping[str, Any] | None = None, *, name: str = ""
) -> None:
    """Raise TypeError, in one line, when `loss` breaks the contract above.

    Raises:
        TypeError: the loss fails on the probe batch, lets masked tokens into its gradient, or
            does not scale with the rollout-correction weights exactly once.
    """
    label = name or getattr(loss, "__qualname__", repr(loss))
    wrapped = verl_policy_loss(loss, options)
    try:
        full = _probe_gradient(wrapped, weight=1.0)
        halved = _probe_gradient(wrapped, weight=0.5)
    except Exception as error:  # noqa: BLE001 - the user's loss: report any failure in one line
        raise TypeError(
            f"{label} failed on a probe batch: {type(error).__name__}: {error}"
        ) from error
    masked = torch.tensor(_LOSS_MASK_B_T) == 0
    if bool(full[masked].abs().max() > 0):
        raise TypeError(
            f"{label} gives a gradient to tokens outside the loss mask (context, padding): "
            "reduce per-token losses with inputs.aggregate(loss_B_T), which keeps only "
            "inputs.loss_mask_B_T == 1"
        )
    reference = float(full[_WEIGHED_TOKEN])
    if reference == 0.0:
        return
    scale = float(halved[_WEIGHED_TOKEN]) / reference
    if abs(scale - 0.5) <= 1e-4:
        return
    if declares_is_weights(loss):
        raise TypeError(
            f"{label} is marked @applies_is_weights but its loss does not scale with "
            "inputs.is_weights_B_T: multiply the per-token losses by them, or drop the mark and "
            "let inputs.aggregate apply them"
        )
    if abs(scale - 0.25) <= 1e-4:
        raise TypeError(
            f"{label} scales by inputs.is_weights_B_T and inputs.aggregate scales again: mark "
            "it @applies_is_weights (uni_agent_core.rl.losses), or leave the weights to aggregate"
        )
    raise TypeError(
        f"{label} does not scale with the rollout-correction weights (inputs.is_weights_B_T): "
        "reduce per-token losses with inputs.aggregate(loss_B_T), which applies them"
    )


def _probe_gradient(wrapped: Any, *, weight: float) -> torch.Tensor:
    """d loss / d logprobs on the probe batch, with the weighed token's weight set."""
    old = torch.tensor(_OLD_LOGPROBS_B_T)
    mask = torch.tensor(_LOSS_MASK_B_T)
    logprobs = old.clone().requires_grad_(True)
    advantages = torch.tensor(_ADVANTAGES_B).unsqueeze(1).expand_as(old).contiguous()
    weights = torch.ones_like(old)
    weights[_WEIGHED_TOKEN] = weight
    config = SimpleNamespace(
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        global_batch_info={
            "dp_size": 1,
            "batch_num_tokens": int(mask.sum()),
            "global_batch_size": old.shape[0],
            "loss_scale_factor": old.shape[1],
        },
    )
    loss, _ = wrapped(
        old_log_prob=old,
        log_prob=logprobs,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
        rollout_is_weights=weights,
    )
    (gradient,) = torch.autograd.grad(loss, logprobs, allow_unused=True)
    return torch.zeros_like(old) if gradient is None else gradient
