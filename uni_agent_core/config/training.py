"""The trainer section: async mode, staleness bound, batch shape, optimizer and checkpoints.

Cross-field rules that need the batch shape and the backend together live here, notably verl's
separate_async requirement `batch_size == parameter_sync_step * ppo_mini_batch_size`, which
Uni-Agent's published defaults violate (they cannot start unmodified).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from uni_agent_core.config.algorithm import GROUP_BASELINE_ESTIMATORS, AlgorithmConfig
from uni_agent_core.config.backend import (
    EmbeddedBackendConfig,
    TrainerBackendConfig,
    VerlBackendConfig,
)
from uni_agent_core.config.base import ConfigModel, raise_conflicts

TrainingMode = Literal["sync", "colocated_async", "separate_async"]
"""How rollout and training share hardware and time."""

MAX_STEPS = 10_000_000
"""The most steps a recipe may train for: ten million weight updates, over three months at a
step a second, where RL runs take hundreds to thousands. A larger value is a typo that would
only show as a run that never ends."""


class StalenessConfig(ConfigModel):
    """Bound on how old the policy behind a trajectory may be when it is trained on."""

    max_versions: int | None = Field(default=None, ge=0)
    """Most policy versions between a trajectory's oldest token and the trainer's weights;
    None means 0 in sync mode and 1 in the async modes."""
    policy: Literal["drop", "wait"] = "wait"
    """Past the bound: `wait` pauses new rollouts until the trainer catches up (no wasted
    compute); `drop` discards the stale trajectory."""


class TrainerConfig(ConfigModel):
    """The RL trainer: what it optimizes, how fast, and how it overlaps with rollouts."""

    backend: TrainerBackendConfig = Field(default_factory=EmbeddedBackendConfig)
    """Where the optimizer runs: `embedded` (one process) or `verl` (Ray pools)."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """Advantage estimator and policy loss."""
    mode: TrainingMode = "colocated_async"
    """`sync`: generate a batch, then train on it; `colocated_async`: one pool, in-flight
    rollouts pause at a weight update and resume on the new weights (partial rollout);
    `separate_async`: separate rollout and trainer pools, an idle trainer serves rollouts."""
    staleness: StalenessConfig = Field(default_factory=StalenessConfig)
    """Off-policy bound of the async modes."""
    group_size: int = Field(default=8, ge=1)
    """Rollouts per task in one step (the GRPO group)."""
    batch_size: int = Field(default=8, ge=1)
    """Tasks per training step; a step trains on `batch_size * group_size` trajectories."""
    lr: float = Field(default=1e-6, gt=0.0)
    """Peak learning rate (AdamW)."""
    lr_warmup_steps: int = Field(default=0, ge=0, le=MAX_STEPS)
    """Steps of linear warm-up to `lr`; constant afterwards. At most `MAX_STEPS`."""
    weight_decay: float = Field(default=0.0, ge=0.0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(default=1.0, gt=0.0)
    """Gradients are clipped to this global norm."""
    total_steps: int = Field(default=100, ge=1, le=MAX_STEPS)
    """Training steps (weight updates of the whole batch) in the run; at most `MAX_STEPS`
    (ten million)."""
    max_response_tokens: int = Field(default=4096, ge=1)
    """Most response tokens of one trajectory (sampled tokens plus tool output across turns);
    longer trajectories end with `max_tokens`."""
    max_context_tokens: int = Field(default=8192, ge=1)
    """Most prompt + response tokens of one trajectory (the context window used in training)."""
    max_concurrent_episodes: int | None = Field(default=None, ge=1)
    """Episodes in flight at once (each holds a sandbox and a gateway session); None means
    `batch_size * group_size`."""
    mask_abnormal_exits: bool = True
    """Keep trajectories that ended abnormally (timeout, sandbox or engine error) for statistics
    but give them zero loss weight."""
    checkpoint_interval: int = Field(default=10, ge=1)
    """Steps between checkpoints (the last step is always saved)."""
    checkpoint_dir: Path | None = None
    """Checkpoint directory; None means `runs/<recipe name>/checkpoints`."""
    keep_checkpoints: int | None = Field(default=3, ge=1)
    """Newest complete checkpoints kept on disk; None keeps all."""
    resume: Literal["auto", "never"] = "auto"
    """`auto` resumes from the newest complete checkpoint in `checkpoint_dir`; `never` starts
    from the initial policy, ignoring existing checkpoints."""
    seed: int | None = None
    """Seed of task order and sampling; None uses the recipe's `seed`."""

    @model_validator(mode="after")
    def _check_shape(self) -> TrainerConfig:
        problems: list[tuple[str, str]] = []
        self._resolve_staleness(problems)
        if self.algorithm.adv_estimator in GROUP_BASELINE_ESTIMATORS and self.group_size < 2:
            problems.append(
                (
                    "group_size",
                    f"{self.algorithm.adv_estimator} compares rollouts of the same task; "
                    "group_size must be >= 2",
                )
            )
        if self.max_response_tokens > self.max_context_tokens:
            problems.append(
                (
                    "max_response_tokens",
                    f"{self.max_response_tokens} exceeds max_context_tokens "
                    f"({self.max_context_tokens})",
                )
            )
        if isinstance(self.backend, VerlBackendConfig):
            self._check_verl(self.backend, problems)
        raise_conflicts(problems)
        return self

    def _resolve_staleness(self, problems: list[tuple[str, str]]) -> None:
        bound = self.staleness.max_versions
        if bound is None:
            self.staleness.max_versions = 0 if self.mode == "sync" else 1
        elif self.mode == "sync" and bound > 0:
            problems.append(
                (
                    "staleness.max_versions",
                    f"sync mode trains on-policy, so it must be 0 (got {bound}); "
                    "use colocated_async or separate_async for off-policy rollouts",
                )
            )
        elif self.mode != "sync" and bound == 0:
            problems.append(
                (
                    "staleness.max_versions",
                    f"{self.mode} overlaps rollouts with weight updates and needs >= 1; "
                    "use mode sync for on-policy training",
                )
            )

    def _check_verl(self, backend: VerlBackendConfig, problems: list[tuple[str, str]]) -> None:
        sync_step = backend.parameter_sync_step
        if backend.ppo_mini_batch_size is None:
            if self.batch_size % sync_step:
                problems.append(
                    (
                        "backend.parameter_sync_step",
                        f"{sync_step} does not divide batch_size ({self.batch_size}); set "
                        "backend.ppo_mini_batch_size or a batch_size divisible by it",
                    )
                )
                return
            backend.ppo_mini_batch_size = self.batch_size // sync_step
        mini = backend.ppo_mini_batch_size
        if self.mode == "separate_async":
            if self.batch_size != sync_step * mini:
                problems.append(
                    (
                        "batch_size",
                        f"verl separate_async needs batch_size == parameter_sync_step * "
                        f"ppo_mini_batch_size, got {self.batch_size} != {sync_step} * {mini}; "
                        f"e.g. set batch_size: {sync_step * mini}",
                    )
                )
            if backend.rollout.nnodes == 0:
                problems.append(
                    (
                        "backend.rollout.nnodes",
                        "separate_async needs a standalone rollout pool (nnodes >= 1)",
                    )
                )
            if backend.checkpoint_engine == "naive":
                problems.append(
                    (
                        "backend.checkpoint_engine",
                        "separate_async pushes weights across pools; use nccl (cuda), hccl "
                        "(npu), nixl or mooncake",
                    )
                )
        else:
            if sync_step != 1:
                problems.append(
                    (
                        "backend.parameter_sync_step",
                        f"{self.mode} sleeps its rollout servers for every training pass, so "
                        f"it must be 1 (got {sync_step})",
                    )
                )
            if backend.rollout.nnodes:
                problems.append(
                    (
                        "backend.rollout.nnodes",
                        f"{self.mode} runs rollout servers on the trainer pool; set 0 (or "
                        "use separate_async for a standalone pool)",
                    )
                )
            if self.batch_size % mini:
                problems.append(
                    (
                        "backend.ppo_mini_batch_size",
                        f"{mini} does not divide batch_size ({self.batch_size})",
                    )
                )
        samples = mini * self.group_size
        dp = backend.data_parallel_size
        if dp and samples % dp:
            problems.append(
                (
                    "backend.ppo_mini_batch_size",
                    f"a mini-batch holds ppo_mini_batch_size * group_size = {samples} "
                    f"trajectories, not divisible by the {dp} data-parallel ranks",
                )
            )
