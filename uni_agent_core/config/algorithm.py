"""The RL algorithm: advantage estimator, policy loss, clipping and off-policy correction.

Names follow verl's `core_algos` registries, which both the embedded and the verl trainer use.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from uni_agent_core.config.base import ConfigModel, ImportPath
from uni_agent_core.plugins import is_user_plugin

BuiltinAdvantageEstimator = Literal["grpo", "rloo", "reinforce_plus_plus", "grpo_passk", "opo"]
"""verl's advantage estimators (`algorithm.adv_estimator`)."""

VerlRegisteredName = Annotated[str, Field(pattern=r"^[A-Za-z_][\w-]*$")]
"""A name a user's module registered in verl's registry (`rl/losses.py::register_for_verl`,
verl's `register_adv_est`); checked against the registry when the recipe is checked."""

AdvantageEstimator = BuiltinAdvantageEstimator | ImportPath | VerlRegisteredName
"""verl's estimators by name, a user's `estimate(inputs: AdvantageInputs) -> Tensor` by import
path, or one registered in verl's registry by name (`rl/losses.py`, `docs/extending.md`)."""

GROUP_BASELINE_ESTIMATORS: frozenset[str] = frozenset({"grpo", "rloo", "grpo_passk", "opo"})
"""Estimators whose baseline comes from the other samples of the same task's group."""

BuiltinPolicyLoss = Literal["vanilla", "gspo", "cispo", "gpg", "clip_cov", "kl_cov", "geo_mean"]
"""verl's policy losses (`policy_loss.loss_mode`)."""

PolicyLoss = BuiltinPolicyLoss | ImportPath | VerlRegisteredName
"""verl's losses by name, a user's `loss(inputs: PolicyLossInputs) -> PolicyLossOutput` by
import path, or one registered in verl's registry by name (`rl/losses.py`,
`docs/extending.md`)."""

LossAggMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
"""How per-token losses are reduced to one number."""


class RolloutCorrectionConfig(ConfigModel):
    """Importance weights that correct for the engine sampling from slightly different weights.

    Async rollouts come from older policy versions and inference kernels differ from training
    kernels; truncated importance sampling (TIS) reweights each token by
    `min(pi_train / pi_rollout, is_threshold)`.
    """

    is_level: Literal["none", "token", "sequence"] = "token"
    """Granularity of the importance weights; `none` disables the correction."""
    is_threshold: float = Field(default=2.0, ge=1.0)
    """Upper clamp of the importance weights."""
    bypass_mode: bool = False
    """Use the engine's logprobs as the old policy instead of recomputing them with the trainer
    (faster; only sound when engine and trainer numerics agree)."""


class AlgorithmConfig(ConfigModel):
    """Advantage estimation and the policy-gradient loss."""

    adv_estimator: AdvantageEstimator = "grpo"
    """How advantages are computed from rewards."""
    norm_adv_by_std: bool = True
    """Divide group-relative advantages by the group's reward std (False gives Dr. GRPO)."""
    policy_loss: PolicyLoss = "vanilla"
    """`vanilla` is token-level PPO clipping; `gspo` clips a sequence-level ratio (use clip
    ratios around 3e-4/4e-4); `cispo` clips the importance weight, not the update; or a user's
    loss, `package.module:function` (the embedded backend; on verl, register it and give its
    name)."""
    policy_loss_options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for a loss named by import path (`loss(inputs, **options)`); verl's
    losses take their settings from the fields below."""
    loss_agg_mode: LossAggMode = "token-mean"
    """Reduction of per-token losses."""
    clip_ratio_low: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Lower clip range: the ratio is kept above `1 - clip_ratio_low`."""
    clip_ratio_high: float = Field(default=0.28, gt=0.0)
    """Upper clip range: the ratio is kept below `1 + clip_ratio_high` (raise it above the low
    range to let rare good tokens grow, DAPO's clip-higher)."""
    clip_ratio_c: float = Field(default=3.0, gt=1.0)
    """Dual-clip bound on the loss of negative-advantage tokens."""
    kl_coef: float = Field(default=0.0, ge=0.0)
    """Weight of a KL penalty toward the initial policy; 0 disables it and the reference model."""
    entropy_coef: float = Field(default=0.0, ge=0.0)
    """Weight of an entropy bonus; 0 disables it."""
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)
    """Off-policy correction of rollout logprobs."""

    @model_validator(mode="after")
    def _options_need_a_loss_of_yours(self) -> AlgorithmConfig:
        if self.policy_loss_options and not is_user_plugin("policy_loss", self.policy_loss):
            raise ValueError(
                "policy_loss_options are given to a loss of yours (by import path, "
                f"`package.module:function`, or installed); {self.policy_loss!r} takes none"
            )
        return self
