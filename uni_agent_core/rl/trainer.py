"""The embedded trainer: one process, torch on CPU (or one GPU), AdamW, verl's losses.

`EmbeddedTrainer.train_step(results)` turns a step's episodes into one weight update:
episodes of zero-variance groups are dropped (dynamic sampling) and abnormal exits masked;
advantages come from verl's estimator per episode (grouped by the GRPO group each was launched
in) and are broadcast to every chain of it. The step makes one optimizer update, so the
old-policy logprobs are the current weights' own: they are taken, detached, from the same
forward that the loss differentiates (or from the engine in bypass mode), which also yields the
rollout-vs-trainer consistency metrics on tokens sampled at the trainer's own version;
truncated importance weights correct the rest. The prompt prefix every row of the step shares
(system + tools) runs once, the longer prefix of each GRPO group (its task statement) once per
group, both with exact gradients (`prefix_forward.SharedPrefix`), and the LM head runs only at
loss positions. The rows after that prefix go longest first, one per
forward on a CPU (batching them was slower there), else in micro-batches by padded-token
budget; gradients accumulate (the loss is normalised over the
whole step, so accumulation equals one large batch), are clipped, and AdamW steps. The policy
version then increases by one; `engine_state()` is what the engines load.

With a bf16 (or fp16) compute dtype the forward and backward passes run on a low-precision copy
of the weights while the optimizer steps float32 master weights (`precision.ComputeCopy`); the
engines load that copy, and `engine_state()` hands it out. float32 is the exact reference.

`shared_prefix=False` keeps the reference path (a separate no-grad forward for the old
logprobs, every row in full, the head at every position): the equality tests and
`bench/train_throughput.py` compare against it, and gradient checkpointing uses it (HF turns
the KV cache off under checkpointing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from uni_agent_core.config.training import TrainerConfig
from uni_agent_core.host_memory import keep_freed_memory_for_reuse, release_host_memory
from uni_agent_core.rl.algorithms import (
    PolicyLoss,
    episode_advantages,
    is_weight_metrics,
    rollout_is_weights,
)
from uni_agent_core.rl.batch import TrajectoryBatch, trajectories_to_batch
from uni_agent_core.rl.logprobs import token_logprobs
from uni_agent_core.rl.metrics import zero_variance_groups
from uni_agent_core.rl.precision import ComputeCopy, ComputeDtype
from uni_agent_core.rl.prefix_forward import SharedPrefix, row_logprobs, rows_prefix_length
from uni_agent_core.rl.trainable import train_top_layers
from uni_agent_core.types import RolloutResult, Trajectory


@dataclass
class StepOutcome:
    """What one `train_step` did."""

    updated: bool
    """False when nothing was trainable (every group had zero variance or was masked)."""
    metrics: dict[str, float] = field(default_factory=dict)
    rows: int = 0
    tokens: int = 0


def micro_batches(lengths: Sequence[int], budget_tokens: int) -> list[list[int]]:
    """Row indices packed in order into micro-batches of at most `budget_tokens` padded tokens
    (rows x longest row); a row longer than the budget gets a micro-batch of its own."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index, length in enumerate(lengths):
        widest = max(longest, length)
        if current and widest * (len(current) + 1) > budget_tokens:
            batches.append(current)
            current, widest = [], length
        current.append(index)
        longest = widest
    if current:
        batches.append(current)
    return batches


def _checkpoint_layers(model: Any) -> None:
    """Hugging Face activation checkpointing of every decoder layer (active in train mode)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"trainer.backend.gradient_checkpointing: {type(model).__name__} does not support it"
        )
    dropouts = {
        name: value
        for name, value in vars(model.config).items()
        if "dropout" in name and isinstance(value, float) and value > 0
    }
    if dropouts:
        raise ValueError(
            f"trainer.backend.gradient_checkpointing needs train mode, which would switch on "
            f"the policy's dropout {dropouts}; the rollout logprobs would no longer match"
        )
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()


def _pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() < 2:
        return float("nan")
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    denominator = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denominator) if denominator > 0 else float("nan")


class EmbeddedTrainer:
    """Holds the trained model and its optimizer; one `train_step` per policy version."""

    def __init__(
        self,
        model: Any,
        config: TrainerConfig,
        *,
        pad_token_id: int,
        drop_zero_variance_groups: bool = True,
        micro_batch_tokens: int = 8192,
        temperature: float = 1.0,
        chunk_tokens: int = 512,
        gradient_checkpointing: bool = False,
        shared_prefix: bool = True,
        compute_dtype: ComputeDtype = "float32",
        trainable_layers: int | None = None,
    ) -> None:
        """Args:
        model: the trained causal LM (its own copy; engines hold theirs); it becomes the
            float32 master the optimizer steps.
        config: the recipe's trainer section.
        pad_token_id: written into padding.
        drop_zero_variance_groups: dynamic sampling of groups whose rewards are all equal.
        micro_batch_tokens: padded tokens per forward/backward micro-batch.
        temperature: the engines' sampling temperature (logprobs are taken at it).
        chunk_tokens: positions projected onto the vocabulary at once.
        gradient_checkpointing: keep only each decoder layer's input in the forward pass and
            recompute the layer in the backward pass (less memory per micro-batch, about a third
            more compute). It needs the model in train mode, so a policy with non-zero dropout
            is refused (train mode would switch it on and the logprobs would change).
        shared_prefix: the fast path (the step's shared prefix once, old logprobs from the
            loss's own forward, the head at loss positions only); False, or gradient
            checkpointing, takes the reference path. Both give the same update.
        compute_dtype: the dtype forward and backward run in; `bfloat16` / `float16` keep
            float32 master weights and optimizer state (`precision.ComputeCopy`).
        trainable_layers: train only the top N decoder layers (`trainable.py`); None trains
            every weight.
        """
        algorithm = config.algorithm
        if algorithm.kl_coef > 0 or algorithm.entropy_coef > 0:
            raise ValueError(
                "trainer.algorithm.kl_coef / entropy_coef: the embedded trainer trains without a "
                "reference model or entropy bonus; set both to 0 (verl supports them)"
            )
        train_top_layers(model, trainable_layers)
        self.precision = ComputeCopy(model, compute_dtype)  # the copy keeps what is frozen
        self.model = model
        """The float32 master weights: what the optimizer steps and checkpoints save."""
        self.compute_model = self.precision.model
        """The weights forward and backward run on (the master itself at float32)."""
        self.config = config
        self.pad_token_id = pad_token_id
        self.drop_zero_variance_groups = drop_zero_variance_groups
        self.temperature = temperature
        self.chunk_tokens = chunk_tokens
        self.micro_batch_tokens = micro_batch_tokens
        self.shared_prefix = shared_prefix and not gradient_checkpointing
        self.device = next(model.parameters()).device
        if self.device.type == "cpu":
            keep_freed_memory_for_reuse()  # no page faults per large tensor (host_memory.py)
        if gradient_checkpointing:
            _checkpoint_layers(self.compute_model)
        self._trained = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self._trained, lr=config.lr, weight_decay=config.weight_decay
        )
        self.loss = PolicyLoss(algorithm, loss_scale_factor=config.max_response_tokens)
        self.version = 0
        """Policy version of the current weights (the number of updates so far)."""

    @property
    def trainable_parameters(self) -> int:
        """Elements the optimizer steps (every weight unless `trainable_layers` is set)."""
        return sum(p.numel() for p in self._trained)

    def engine_state(self) -> dict[str, torch.Tensor]:
        """The weights for the engines, in the compute dtype (shared tensors; load them before
        the next step)."""
        return self.compute_model.state_dict()

    def weights_restored(self) -> None:
        """Call after loading weights into `model` (a checkpoint): the compute copy follows."""
        self.precision.refresh()

    def _lr(self) -> float:
        warmup = self.config.lr_warmup_steps
        if warmup and self.version < warmup:
            return self.config.lr * (self.version + 1) / warmup
        return self.config.lr

    def _trainable(self, results: Sequence[RolloutResult]) -> list[RolloutResult]:
        flat = zero_variance_groups(results) if self.drop_zero_variance_groups else set()
        return [
            r
            for r in results
            if r.group_key not in flat
            and not (self.config.mask_abnormal_exits and r.abnormal)
            and r.sampled_tokens > 0
        ]

    def train_step(self, results: Sequence[RolloutResult]) -> StepOutcome:
        """One weight update from a step's episodes (all samples of each task's group)."""
        started = time.perf_counter()
        kept = self._trainable(results)
        if not kept:
            metrics = self._diagnose(results)
            metrics["perf/train_s"] = time.perf_counter() - started
            return StepOutcome(updated=False, metrics=metrics)
        rewards = torch.tensor([r.reward for r in kept], dtype=torch.float32)
        advantages_E = episode_advantages(
            rewards, [r.group_key for r in kept], self.config.algorithm
        )
        rows: list[Trajectory] = []
        row_advantages: list[float] = []
        row_groups: list[str] = []
        for result, advantage in zip(kept, advantages_E.tolist(), strict=True):
            for trajectory in result.trajectories:
                if trajectory.trainable_tokens:
                    rows.append(trajectory)
                    row_advantages.append(advantage)
                    row_groups.append(result.group_key)
        batch = trajectories_to_batch(
            rows, pad_token_id=self.pad_token_id, max_length=self.config.max_context_tokens
        )
        advantages_B = torch.tensor(row_advantages, dtype=torch.float32)
        metrics = self._update(batch, advantages_B, row_groups)
        tokens, size = int(batch.loss_mask_B_T.sum()), batch.size
        del batch
        release_host_memory()  # the step's activations, back to the OS (host_memory.py)
        metrics["perf/train_s"] = time.perf_counter() - started
        metrics["perf/trained_tokens_per_s"] = tokens / metrics["perf/train_s"]
        metrics["train/trained_tokens"] = float(tokens)
        metrics["train/trained_episodes"] = float(len(kept))
        return StepOutcome(updated=True, metrics=metrics, rows=size, tokens=tokens)

    def _diagnose(self, results: Sequence[RolloutResult]) -> dict[str, float]:
        """Consistency metrics of a step that trains on nothing (every group was flat)."""
        pairs = [
            (t, r.group_key)
            for r in results
            if not r.abnormal
            for t in r.trajectories
            if t.trainable_tokens
        ]
        if not pairs:
            return {}
        batch = trajectories_to_batch(
            [t for t, _ in pairs],
            pad_token_id=self.pad_token_id,
            max_length=self.config.max_context_tokens,
        )
        if self.shared_prefix:
            with torch.no_grad():
                old, _ = self._shared_prefix_pass(batch, [g for _, g in pairs])
        else:
            old = self._old_logprobs(batch)
        return self._consistency(batch, old)

    def _old_logprobs(self, batch: TrajectoryBatch) -> torch.Tensor:
        lengths = batch.attention_mask_B_T.sum(dim=1).tolist()
        old = torch.zeros_like(batch.rollout_logprobs_B_T)
        with torch.no_grad():
            for rows in micro_batches(lengths, self.micro_batch_tokens):
                values = self._logprobs(batch, rows)
                old[rows, : values.shape[1]] = values
        return old

    def _logprobs(self, batch: TrajectoryBatch, rows: list[int]) -> torch.Tensor:
        width = int(batch.attention_mask_B_T[rows].sum(dim=1).max())
        return token_logprobs(
            self.compute_model,
            batch.input_ids_B_T[rows, :width].to(self.device),
            batch.attention_mask_B_T[rows, :width].to(self.device),
            temperature=self.temperature,
            chunk_tokens=self.chunk_tokens,
        ).cpu()

    def _update(
        self, batch: TrajectoryBatch, advantages_B: torch.Tensor, groups_B: Sequence[str]
    ) -> dict[str, float]:
        mask = batch.loss_mask_B_T
        self.loss.set_step_totals(tokens=int(mask.sum()), rows=int((mask.sum(dim=1) > 0).sum()))
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr()
        self.optimizer.zero_grad(set_to_none=True)
        self.precision.zero_grad()
        if self.shared_prefix:
            old, loss_metrics = self._shared_prefix_pass(batch, groups_B, advantages_B)
            metrics = self._consistency(batch, old)
            metrics.update(loss_metrics)
            algorithm = self.config.algorithm
            weights = rollout_is_weights(old, batch.rollout_logprobs_B_T, mask, algorithm)
            metrics.update(is_weight_metrics(weights, mask, algorithm))
        else:
            metrics = self._reference_pass(batch, advantages_B)
        self.precision.grads_to_master()
        grad_norm = torch.nn.utils.clip_grad_norm_(self._trained, self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.precision.refresh()
        self.version += 1
        metrics.update(
            {
                "train/grad_norm": float(grad_norm),
                "train/lr": self.optimizer.param_groups[0]["lr"],
                "train/advantage_abs_mean": float(advantages_B.abs().mean()),
            }
        )
        return metrics

    def _shared_prefix_pass(
        self,
        batch: TrajectoryBatch,
        groups_B: Sequence[str],
        advantages_B: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The trainer's logprobs of every sampled token ([B, T], 0.0 elsewhere) and, with
        advantages, the loss's metrics, its gradients accumulated into the model. The prefix
        every row shares runs once, and the longer prefix the rows of one GRPO group share
        (`groups_B`: their task statement) once per group; rows go longest
        first, one per forward on a CPU, else in micro-batches of `micro_batch_tokens` padded
        tokens after their prefix."""
        mask = batch.loss_mask_B_T
        lengths = batch.attention_mask_B_T.sum(dim=1).tolist()
        start = rows_prefix_length(batch, range(batch.size))
        members: dict[str, list[int]] = {}
        for row in sorted(range(batch.size), key=lambda row: -lengths[row]):
            members.setdefault(groups_B[row], []).append(row)
        training = advantages_B is not None
        metrics: dict[str, float] = {}
        old = torch.zeros_like(batch.rollout_logprobs_B_T)
        step_prefix = SharedPrefix(
            self.compute_model, batch.input_ids_B_T[0, :start].to(self.device)
        )
        total_loss, forwards, group_tokens = 0.0, 0, 0
        sums: dict[str, float] = {}
        for rows in members.values():
            shared = rows_prefix_length(batch, rows)
            prefix = step_prefix.extend(batch.input_ids_B_T[rows[0], start:shared].to(self.device))
            group_tokens += shared - start
            for chunk in self._forward_chunks(rows, [lengths[r] - shared for r in rows]):
                width = int(max(lengths[r] for r in chunk))
                values = row_logprobs(
                    prefix,
                    batch.input_ids_B_T[chunk, :width].to(self.device),
                    batch.attention_mask_B_T[chunk, :width].to(self.device),
                    mask[chunk, :width].to(self.device),
                    temperature=self.temperature,
                    chunk_tokens=self.chunk_tokens,
                ).cpu()
                old[chunk, shared:width] = values.detach()
                forwards += 1
                if advantages_B is None:  # a logprob pass: no loss
                    continue
                loss, step_metrics = self._micro_batch_loss(
                    batch, advantages_B, chunk, slice(shared, width), values
                )
                loss.backward()
                total_loss += float(loss.detach())
                for key, value in step_metrics.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
            if training:
                prefix.backward()
            prefix.release()
        if training:
            step_prefix.backward()
            metrics.update({key: value / forwards for key, value in sums.items()})
            metrics["train/loss"] = total_loss
            metrics["train/micro_batches"] = float(forwards)
            metrics["train/shared_prefix_tokens"] = float(start)
            metrics["train/group_prefix_tokens_mean"] = group_tokens / len(members)
        step_prefix.release()
        return old, metrics

    def _forward_chunks(self, rows: list[int], suffixes: list[int]) -> list[list[int]]:
        """Rows of one forward each on a CPU (no padding: on 2 cores three SmolLM2 rows batched
        took 24% longer than one at a time, even at equal lengths), else micro-batches."""
        if self.device.type == "cpu":
            return [[row] for row in rows]
        return [
            [rows[i] for i in group] for group in micro_batches(suffixes, self.micro_batch_tokens)
        ]

    def _micro_batch_loss(
        self,
        batch: TrajectoryBatch,
        advantages_B: torch.Tensor,
        rows: list[int],
        span: slice,
        values: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """verl's loss of `rows` over token positions `span`, old logprobs = `values` detached
        (one update per step: the weights that made `values` are the old policy)."""
        mask = batch.loss_mask_B_T[rows, span]
        rollout = batch.rollout_logprobs_B_T[rows, span]
        algorithm = self.config.algorithm
        old = rollout if algorithm.rollout_correction.bypass_mode else values.detach()
        weights = rollout_is_weights(old, rollout, mask, algorithm)
        return self.loss(
            old_logprobs_B_T=old,
            logprobs_B_T=values,
            advantages_B_T=advantages_B[rows, None] * mask,
            loss_mask_B_T=mask,
            is_weights_B_T=weights,
        )

    def _reference_pass(
        self, batch: TrajectoryBatch, advantages_B: torch.Tensor
    ) -> dict[str, float]:
        """Today's path kept as the reference: old logprobs from a separate no-grad forward,
        every row in full, the head at every position."""
        lengths = batch.attention_mask_B_T.sum(dim=1).tolist()
        groups = micro_batches(lengths, self.micro_batch_tokens)
        mask = batch.loss_mask_B_T
        old = self._old_logprobs(batch)
        metrics = self._consistency(batch, old)
        rollout = batch.rollout_logprobs_B_T
        algorithm = self.config.algorithm
        if algorithm.rollout_correction.bypass_mode:
            old = rollout.clone()
        weights = rollout_is_weights(old, rollout, mask, algorithm)
        metrics.update(is_weight_metrics(weights, mask, algorithm))
        total_loss = 0.0
        verl_metrics: dict[str, float] = {}
        for rows in groups:
            values = self._logprobs(batch, rows)
            width = values.shape[1]
            loss, step_metrics = self.loss(
                old_logprobs_B_T=old[rows, :width],
                logprobs_B_T=values,
                advantages_B_T=advantages_B[rows, None] * mask[rows, :width],
                loss_mask_B_T=mask[rows, :width],
                is_weights_B_T=None if weights is None else weights[rows, :width],
            )
            loss.backward()
            total_loss += float(loss.detach())
            for key, value in step_metrics.items():
                verl_metrics[key] = verl_metrics.get(key, 0.0) + float(value) / len(groups)
        metrics.update(verl_metrics)
        metrics["train/loss"] = total_loss
        metrics["train/micro_batches"] = float(len(groups))
        return metrics

    def _consistency(self, batch: TrajectoryBatch, old: torch.Tensor) -> dict[str, float]:
        """Rollout vs trainer logprobs on tokens sampled at the trainer's current version."""
        same = (batch.loss_mask_B_T == 1) & (batch.policy_versions_B_T == self.version)
        if not bool(same.any()):
            return {}
        trainer_lp, rollout_lp = old[same], batch.rollout_logprobs_B_T[same]
        return {
            "train/logprob_pearson": _pearson(trainer_lp, rollout_lp),
            "train/prob_diff_mean": float((trainer_lp.exp() - rollout_lp.exp()).abs().mean()),
            "train/logprob_diff_max": float((trainer_lp - rollout_lp).abs().max()),
            "train/consistency_tokens": float(same.sum()),
        }
