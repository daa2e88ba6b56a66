"""A whole local training run of a recipe: rollouts, updates, weight sync, checkpoints, metrics.

`TrainingRun(recipe).run()` builds everything from the recipe — tasks, the engine behind an
in-loop gateway, the rollout driver, the embedded trainer (its own copy of the policy) — resumes
from the newest complete checkpoint when `trainer.resume: auto`, and trains `total_steps` steps
in the recipe's mode:

- `sync`: sample `batch_size` tasks, run their groups, train, push weights, repeat.
- `colocated_async`: a producer keeps groups running on the shared engine while the trainer
  works (in a worker thread); every update pauses the engine, loads the new weights and resumes
  in-flight generations on them (partial rollout: one trajectory can span versions). Staleness
  is bounded by `trainer.staleness`: `wait` stops launching groups that would exceed the bound,
  `drop` discards groups whose oldest token is too old.

Per step it appends one JSON line to `<run dir>/metrics.jsonl` and prints a progress line; the
checkpoint (every `checkpoint_interval` steps and at the end) records the sampler cursor and
the groups launched but not trained, which a resumed run launches first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.curriculum.history import Attempt, AttemptHistory
from uni_agent_core.curriculum.sampler import DynamicSampler
from uni_agent_core.envs.sources import load_tasks
from uni_agent_core.rl.checkpoint import latest_complete, prune, restore_checkpoint, save_checkpoint
from uni_agent_core.rl.metrics import episode_metrics
from uni_agent_core.rl.rollout import RolloutDriver
from uni_agent_core.rl.sampler import EpochSampler
from uni_agent_core.rl.stack import rollout_stack
from uni_agent_core.rl.trainer import EmbeddedTrainer
from uni_agent_core.types import RolloutResult, TaskSpec

logger = logging.getLogger(__name__)


@dataclass
class RunSummary:
    """What a run did."""

    run_dir: Path
    start_step: int
    steps: int
    metrics: list[dict[str, float]] = field(default_factory=list)
    resumed_from: Path | None = None


@dataclass
class _Group:
    task_id: str
    step_launched: int
    results: list[RolloutResult]


def default_run_dir(recipe: Recipe) -> Path:
    from uni_agent_core.config.recipe import RUNS_DIR

    return Path(RUNS_DIR) / recipe.name


def history_path(recipe: Recipe, run_dir: Path | None = None) -> Path:
    """The run's attempt history: the recipe's path, or `<run dir>/history.sqlite`."""
    run_dir = run_dir or default_run_dir(recipe)
    configured = recipe.curriculum.history_path
    if configured is None or configured == default_run_dir(recipe) / "history.sqlite":
        return run_dir / "history.sqlite"
    return Path(configured)


class TrainingRun:
    """One training run of a recipe on this machine (embedded trainer)."""

    def __init__(
        self,
        recipe: Recipe,
        *,
        run_dir: Path | None = None,
        echo: Callable[[str], None] = print,
        stop_after_steps: int | None = None,
        driver_class: type[RolloutDriver] = RolloutDriver,
    ) -> None:
        """Args:
        recipe: the validated recipe.
        run_dir: where metrics and (by default) checkpoints go; default `runs/<name>`.
        echo: receives one progress line per step.
        stop_after_steps: end the process's work after this many steps (tests of resume).
        driver_class: the rollout driver (a subclass can post-process episodes).
        """
        if recipe.trainer.backend.type != "embedded":
            raise ValueError(
                "trainer.backend.type: `agent-rl train` runs the embedded trainer; verl recipes "
                "launch through the verl launcher"
            )
        if recipe.trainer.mode == "separate_async":
            raise ValueError(
                "trainer.mode: separate_async needs separate rollout replicas behind the router "
                "(role switching lends the trainer to them); the embedded run supports sync and "
                "colocated_async"
            )
        self.recipe = recipe
        self.run_dir = run_dir or default_run_dir(recipe)
        configured = recipe.trainer.checkpoint_dir
        if configured is None or configured == default_run_dir(recipe) / "checkpoints":
            configured = self.run_dir / "checkpoints"  # the recipe left the default
        self.checkpoint_dir = Path(configured)
        self.echo = echo
        self.stop_after_steps = stop_after_steps
        self.seed = recipe.trainer.seed if recipe.trainer.seed is not None else recipe.seed
        self.driver_class = driver_class
        self.history: AttemptHistory | None = None
        """The attempt history when the curriculum is enabled."""

    # -- building ------------------------------------------------------------------------------

    def _build(self) -> tuple[dict[str, TaskSpec], EmbeddedTrainer]:
        from uni_agent_core.inference.builder import resolve_device
        from uni_agent_core.models import load_policy

        recipe, trainer_config = self.recipe, self.recipe.trainer
        random.seed(self.seed)
        np.random.seed(self.seed % 2**32)
        torch.manual_seed(self.seed)
        tasks = {task.instance_id: task for task in load_tasks(recipe.tasks)}
        backend = trainer_config.backend
        model, tokenizer = load_policy(
            recipe.policy.name,
            dtype=recipe.policy.dtype,
            device=resolve_device(backend.device),
            chat_template=recipe.policy.chat_template,
        )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        trainer = EmbeddedTrainer(
            model,
            trainer_config,
            pad_token_id=pad,
            drop_zero_variance_groups=recipe.curriculum.drop_zero_variance_groups,
            micro_batch_tokens=backend.micro_batch_tokens,
            temperature=recipe.gateway.sampling.temperature or 1.0,
        )
        return tasks, trainer

    # -- running -------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        """Train to `total_steps` (or `stop_after_steps`); blocking."""
        return asyncio.run(self.run_async())

    async def run_async(self) -> RunSummary:
        tasks, trainer = self._build()
        trainer_config = self.recipe.trainer
        sampler = self._sampler(sorted(tasks))
        start_step, pending, resumed, launched = 0, [], None, 0
        if trainer_config.resume == "auto":
            checkpoint = latest_complete(self.checkpoint_dir)
            if checkpoint is not None:
                restore_checkpoint(checkpoint, model=trainer.model, optimizer=trainer.optimizer)
                trainer.version = int(checkpoint.state["version"])
                sampler.load_state_dict(checkpoint.state["sampler"])
                pending = list(checkpoint.state.get("pending", []))
                launched = int(checkpoint.state.get("launched", 0)) - len(pending)
                start_step, resumed = checkpoint.step, checkpoint.path
                self.echo(f"resuming from {checkpoint.path} (step {checkpoint.step})")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        summary = RunSummary(self.run_dir, start_step, 0, resumed_from=resumed)
        concurrency = trainer_config.max_concurrent_episodes or (
            trainer_config.batch_size * trainer_config.group_size
        )
        async with rollout_stack(
            self.recipe, max_concurrency=concurrency, driver_class=self.driver_class
        ) as stack:
            if trainer.version:
                await stack.engine.update_weights(trainer.engine_state(), trainer.version)
            loop = _Loop(
                self,
                tasks,
                stack.driver,
                trainer,
                stack.engine,
                sampler,
                pending,
                summary,
                launched,
            )
            await loop.run(start_step)
        return summary

    def _sampler(self, task_ids: list[str]) -> Any:
        """The curriculum's dynamic sampler (fed by the attempt history), or epoch order."""
        curriculum = self.recipe.curriculum
        if not curriculum.enabled:
            return EpochSampler(task_ids, self.seed)
        self.history = AttemptHistory(self._history_path())
        return DynamicSampler(
            task_ids,
            seed=self.seed,
            window=curriculum.window,
            min_attempts=curriculum.min_attempts,
            band=curriculum.target_band,
            probe_rate=curriculum.probe_rate,
            history=self.history.recent_rewards(curriculum.window),
        )

    def _history_path(self) -> Path:
        return history_path(self.recipe, self.run_dir)


class _Loop:
    """The step loop of one run (both modes share launching, training and bookkeeping)."""

    def __init__(
        self,
        run: TrainingRun,
        tasks: dict[str, TaskSpec],
        driver: RolloutDriver,
        trainer: EmbeddedTrainer,
        engine: Any,
        sampler: Any,
        pending: list[str],
        summary: RunSummary,
        launched: int,
    ) -> None:
        self.run_ = run
        self.config = run.recipe.trainer
        self.tasks = tasks
        self.driver = driver
        self.trainer = trainer
        self.engine = engine
        self.sampler = sampler
        self.replay = list(pending)
        self.summary = summary
        self.launched = int(launched)
        """Groups launched over the whole run (their index seeds their episodes)."""
        self.dropped = 0
        self.unconsumed: list[str] = []
        """Tasks of finished groups not yet trained on (saved as pending in checkpoints)."""
        self.in_flight: dict[asyncio.Task[_Group], str] = {}
        self.ready: asyncio.Queue[_Group] = asyncio.Queue()
        self.metrics_path = run.run_dir / "metrics.jsonl"

    def _next_task_id(self) -> str:
        return self.replay.pop(0) if self.replay else self.sampler.next_task()

    def _launch(self, step: int) -> None:
        task_id = self._next_task_id()
        index = self.launched
        self.launched += 1

        async def group() -> _Group:
            results = await self.driver.group(
                self.tasks[task_id], self.config.group_size, run_seed=self.run_.seed, step=index
            )
            return _Group(task_id, step, results)

        job = asyncio.create_task(group())
        self.in_flight[job] = task_id
        job.add_done_callback(self._finished)

    def _finished(self, job: asyncio.Task[_Group]) -> None:
        self.in_flight.pop(job, None)
        if not job.cancelled():
            if job.exception() is not None:
                self.ready.put_nowait(job)  # type: ignore[arg-type]
            else:
                group = job.result()
                self._observe(group)
                self.unconsumed.append(group.task_id)
                self.ready.put_nowait(group)

    def _observe(self, group: _Group) -> None:
        """Feed a finished group to the curriculum: the sampler's windows and the history."""
        update = getattr(self.sampler, "update", None)
        for result in group.results:
            if update is not None:
                update(result.task_id, result.reward)
        history = self.run_.history
        if history is not None:
            history.record(
                Attempt(
                    task_id=r.task_id,
                    reward=r.reward,
                    policy_version=r.oldest_version or r.started_version,
                    run_id=self.run_.recipe.name,
                    exit_reason=r.exit_reason.value,
                )
                for r in group.results
            )

    async def _take(self) -> _Group:
        item = await self.ready.get()
        if isinstance(item, asyncio.Task):
            item.result()  # re-raise the group's failure
        self.unconsumed.remove(item.task_id)
        return item

    async def run(self, start_step: int) -> None:
        total = self.config.total_steps
        last = (
            total
            if self.run_.stop_after_steps is None
            else min(total, start_step + self.run_.stop_after_steps)
        )
        asynchronous = self.config.mode == "colocated_async"
        bound = self.config.staleness.max_versions or 0
        per_step = self.config.batch_size
        try:
            for step in range(start_step, last):
                step_started = time.perf_counter()
                waited = 0.0
                if asynchronous:
                    self._fill(step, bound)
                else:
                    for _ in range(per_step):
                        self._launch(step)
                groups: list[_Group] = []
                dropped = 0
                while len(groups) < per_step:
                    clock = time.perf_counter()
                    group = await self._take()
                    waited += time.perf_counter() - clock
                    if asynchronous and self._too_stale(group, bound):
                        dropped += 1
                        self.dropped += 1
                        self._fill(step, bound)
                        continue
                    groups.append(group)
                results = [r for g in groups for r in g.results]
                metrics = episode_metrics(results, self.trainer.version)
                rollout_s = time.perf_counter() - step_started
                loop = asyncio.get_running_loop()
                outcome = await loop.run_in_executor(None, self.trainer.train_step, results)
                if outcome.updated:
                    await self.engine.update_weights(
                        self.trainer.engine_state(), self.trainer.version
                    )
                elapsed = time.perf_counter() - step_started
                metrics.update(outcome.metrics)
                metrics.update(
                    {
                        "perf/rollout_s": rollout_s,
                        "perf/wait_s": waited,
                        "perf/step_s": elapsed,
                        "perf/tokens_per_s": sum(r.sampled_tokens for r in results) / elapsed,
                        "train/dropped_stale_groups": float(dropped),
                        "train/policy_version": float(self.trainer.version),
                    }
                )
                if hasattr(self.sampler, "metrics"):
                    metrics.update(self.sampler.metrics())
                self._record(step + 1, metrics)
                if (step + 1) % self.config.checkpoint_interval == 0 or step + 1 == total:
                    self._checkpoint(step + 1)
        finally:
            for job in list(self.in_flight):
                job.cancel()
            if self.in_flight:
                await asyncio.gather(*self.in_flight, return_exceptions=True)

    def _fill(self, step: int, bound: int) -> None:
        """Launch the groups the staleness bound allows by step `step`.

        Groups are trained roughly in launch order, `batch_size` per step, so a group launched
        during step s is trained by step s + bound when at most `(s + bound + 1) * batch_size`
        groups (plus those dropped) have been launched: `wait` launches no more than that. `drop`
        looks one batch further ahead and discards what arrives too old.
        """
        ahead = bound + (2 if self.config.staleness.policy == "drop" else 1)
        allowed = (step + ahead) * self.config.batch_size + self.dropped
        while self.launched < allowed:
            self._launch(step)

    def _too_stale(self, group: _Group, bound: int) -> bool:
        versions = [r.oldest_version for r in group.results if r.oldest_version is not None]
        return bool(versions) and self.trainer.version - min(versions) > bound

    def _record(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{key: round(value, 6) for key, value in metrics.items()}}
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        self.summary.metrics.append(row)
        self.summary.steps += 1
        self.run_.echo(
            f"step {step}/{self.config.total_steps} v{self.trainer.version} "
            f"reward {metrics.get('train/reward_mean', 0.0):.3f} "
            f"pass {metrics.get('train/pass_rate', 0.0):.3f} "
            f"loss {metrics.get('train/loss', float('nan')):.4f} "
            f"pearson {metrics.get('train/logprob_pearson', float('nan')):.5f} "
            f"stale {metrics.get('train/staleness_max', 0.0):.0f} "
            f"rollout {metrics['perf/rollout_s']:.1f}s train {metrics.get('perf/train_s', 0):.1f}s "
            f"{metrics['perf/tokens_per_s']:.0f} tok/s"
        )

    def _checkpoint(self, step: int) -> None:
        pending = self.unconsumed + list(self.in_flight.values()) + self.replay
        state = {
            "version": self.trainer.version,
            "sampler": self.sampler.state_dict(),
            "pending": pending,
            "launched": self.launched,
            "curriculum": None,
            "recipe": self.run_.recipe.name,
        }
        path = save_checkpoint(
            self.run_.checkpoint_dir,
            step,
            model=self.trainer.model,
            optimizer=self.trainer.optimizer,
            state=state,
        )
        prune(self.run_.checkpoint_dir, self.config.keep_checkpoints)
        logger.info("checkpoint %s", path)
