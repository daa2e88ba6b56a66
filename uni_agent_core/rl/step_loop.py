"""The step loop of a training run: launching groups, staleness, training, bookkeeping.

Every mode shares it. `sync` launches `batch_size` groups per step and trains on exactly them;
`colocated_async` keeps groups running ahead of the trainer within the staleness bound (see
`_fill`), trains in a worker thread while rollouts continue, and pushes weights to the engine,
which pauses, loads them and resumes in-flight generations (partial rollout). `separate_async`
does the same over the rollout replicas and, while the trainer waits for its batch, lends the
trainer's own model to them as one more replica (`role_switch.RoleSwitch`). Every episode
feeds the curriculum sampler and the attempt history as it finishes; every step writes one
metrics line (and MLflow point) and, on schedule, a checkpoint that records groups launched but
not trained.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uni_agent_core.curriculum.history import Attempt
from uni_agent_core.rl.metrics import episode_metrics, router_step_metrics, zero_variance_groups
from uni_agent_core.rl.samples import write_samples
from uni_agent_core.rl.trainer import EmbeddedTrainer
from uni_agent_core.rollout.driver import RolloutDriver
from uni_agent_core.router.router import Router
from uni_agent_core.rundir.checkpoint import prune, save_checkpoint
from uni_agent_core.rundir.layout import METRICS, TRAJECTORIES
from uni_agent_core.types import RolloutResult, TaskSpec

if TYPE_CHECKING:
    from uni_agent_core.rl.run import RunSummary, TrainingRun

logger = logging.getLogger(__name__)


@dataclass
class _Group:
    task_id: str
    step_launched: int
    results: list[RolloutResult]


class StepLoop:
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
        role_switch: Any = None,
    ) -> None:
        self.run_ = run
        self.config = run.recipe.trainer
        self.tasks = tasks
        self.driver = driver
        driver.on_episode = self._observe
        self.trainer = trainer
        self.engine = engine
        self.router = engine if isinstance(engine, Router) else None
        """The rollout router when there are several replicas (its counters feed `router/*`)."""
        self.sampler = sampler
        self.replay = list(pending)
        self.summary = summary
        self.launched = int(launched)
        """Groups launched over the whole run (their index seeds their episodes)."""
        self.dropped = 0
        self.refill_budget = run.recipe.curriculum.refill_flat_groups
        """Flat groups one step may replace with newly launched ones (DAPO's dynamic sampling)."""
        self.refilled = 0
        """Groups launched over the whole run to replace flat ones."""
        self.unconsumed: list[str] = []
        """Tasks of finished groups not yet trained on (saved as pending in checkpoints)."""
        self.in_flight: dict[asyncio.Task[_Group], str] = {}
        self.ready: asyncio.Queue[_Group] = asyncio.Queue()
        self.metrics_path = run.run_dir / METRICS
        self.role_switch = role_switch
        """`RoleSwitch` in separate_async: the trainer serves rollouts while it waits."""

    def _next_task_id(self) -> str:
        return self.replay.pop(0) if self.replay else self.sampler.next_task()

    def _launch(self, step: int) -> None:
        task_id = self._next_task_id()
        index = self.launched
        self.launched += 1

        async def group() -> _Group:
            results = await self.driver.group(
                self.tasks[task_id],
                self.config.group_size,
                run_seed=self.run_.seed,
                step=index,
                group_id=f"{task_id}@{index}",
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
                self.unconsumed.append(group.task_id)
                self.ready.put_nowait(group)

    def _observe(self, result: RolloutResult) -> None:
        """Feed one finished episode to the curriculum: the sampler's window and the history."""
        update = getattr(self.sampler, "update", None)
        if update is not None:
            update(result.task_id, result.reward)
        history = self.run_.history
        if history is not None:
            history.record(
                [
                    Attempt(
                        task_id=result.task_id,
                        reward=result.reward,
                        policy_version=result.oldest_version or result.started_version,
                        run_id=self.run_.recipe.name,
                        exit_reason=result.exit_reason.value,
                    )
                ]
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
        asynchronous = self.config.mode in ("colocated_async", "separate_async")
        switch = self.role_switch
        bound = self.config.staleness.max_versions or 0
        per_step = self.config.batch_size
        try:
            for step in range(start_step, last):
                step_started = time.perf_counter()
                routed = vars(self.router.core.counters).copy() if self.router else {}
                waited = 0.0
                if asynchronous:
                    self._fill(step, bound)
                else:
                    for _ in range(per_step):
                        self._launch(step)
                groups: list[_Group] = []
                replaced: list[_Group] = []
                dropped = 0
                while len(groups) < per_step:
                    clock = time.perf_counter()
                    if switch is not None and self.ready.empty():
                        switch.lend()  # nothing to train yet: serve rollouts meanwhile
                    group = await self._take()
                    waited += time.perf_counter() - clock
                    if asynchronous and self._too_stale(group, bound):
                        dropped += 1
                        self.dropped += 1
                        self._fill(step, bound)
                        continue
                    if len(replaced) < self.refill_budget and zero_variance_groups(group.results):
                        replaced.append(group)
                        self._replace(step, bound, asynchronous)
                        continue
                    groups.append(group)
                if switch is not None:
                    await switch.reclaim()
                results = [r for g in groups for r in g.results]
                # the policy's reward over everything it sampled, replaced flat groups included
                metrics = episode_metrics(
                    results + [r for g in replaced for r in g.results], self.trainer.version
                )
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
                        "train/refilled_flat_groups": float(len(replaced)),
                        "train/policy_version": float(self.trainer.version),
                    }
                )
                if switch is not None:
                    metrics.update(switch.step_metrics())
                if self.router is not None:
                    metrics.update(router_step_metrics(routed, vars(self.router.core.counters)))
                if hasattr(self.sampler, "metrics"):
                    metrics.update(self.sampler.metrics())
                self._record(step + 1, metrics)
                write_samples(
                    results,
                    step + 1,
                    self.run_.run_dir / TRAJECTORIES,
                    self.run_.recipe.tracking.log_trajectories_per_step,
                    self.run_.tokenizer,
                )
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
        allowed = (step + ahead) * self.config.batch_size + self.dropped + self.refilled
        while self.launched < allowed:
            self._launch(step)

    def _replace(self, step: int, bound: int, asynchronous: bool) -> None:
        """Launch one group in place of a flat one (within the staleness bound when async)."""
        self.refilled += 1
        if asynchronous:
            self._fill(step, bound)
        else:
            self._launch(step)

    def _too_stale(self, group: _Group, bound: int) -> bool:
        versions = [r.oldest_version for r in group.results if r.oldest_version is not None]
        return bool(versions) and self.trainer.version - min(versions) > bound

    def _record(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{key: round(value, 6) for key, value in metrics.items()}}
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        self.summary.metrics.append(row)
        if self.run_.tracker is not None:
            self.run_.tracker.log_step(step, metrics)
        self.summary.steps += 1
        if "train/loss" in metrics:
            pearson = metrics.get("train/logprob_pearson", math.nan)
            # measured on tokens sampled at the trainer's version; an async step can have none
            agreement = "n/a" if math.isnan(pearson) else f"{pearson:.5f}"
            update = f"loss {metrics['train/loss']:.4f} pearson {agreement} "
        else:
            update = "no update (every group's rewards are equal: no learning signal) "
        if metrics.get("train/refilled_flat_groups"):
            update += f"refilled {metrics['train/refilled_flat_groups']:.0f} flat groups "
        self.run_.echo(
            f"step {step}/{self.config.total_steps} v{self.trainer.version} "
            f"reward {metrics.get('train/reward_mean', 0.0):.3f} "
            f"pass {metrics.get('train/pass_rate', 0.0):.3f} "
            f"{update}"
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
            "mlflow_run_id": self.run_.tracker.run_id if self.run_.tracker else None,
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
