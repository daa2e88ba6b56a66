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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from uni_agent_core.config.training import TrainerConfig
from uni_agent_core.curriculum.task_sampler import TaskSampler
from uni_agent_core.rl.metrics import (
    episode_metrics,
    router_step_metrics,
    sandbox_step_metrics,
    zero_variance_groups,
)
from uni_agent_core.rl.step_records import Checkpointer, StepRecorder
from uni_agent_core.rl.trainer import EmbeddedTrainer
from uni_agent_core.rollout.driver import RolloutDriver
from uni_agent_core.router.router import Router
from uni_agent_core.types import RolloutResult, TaskSpec


@dataclass
class _Group:
    task_id: str
    step_launched: int
    results: list[RolloutResult]


class StepLoop:
    """The step loop of one run (every mode shares launching, training and bookkeeping).

    Args:
        config: the recipe's trainer section (mode, batch and group size, staleness, steps).
        tasks: the run's tasks by id.
        driver: runs the groups (`group(task, size, run_seed=, step=, group_id=, on_episode=)`).
        trainer: trains a step's episodes (`train_step`) and hands out its weights.
        engine: the rollout engine (or router) the weights are pushed to after each update.
        sampler: where task ids come from; it observes every finished episode.
        recorder: where each step's metrics and trajectories go.
        checkpointer: saves the run's state on schedule.
        seed: the run's seed (a group's episodes are seeded from it and the group's index).
        refill_flat_groups: flat groups one step may replace with newly launched ones.
        pending: task ids of groups launched but not trained before a resume (launched first).
        launched: groups launched over the run so far (their index seeds their episodes).
        stop_after_steps: stop after this many steps of this call (the run resumes later).
        deadline: a `time.monotonic()` instant: no step starts that would end after it, judged
            by the longest step of this call so far; the last step trained is checkpointed
            (the run resumes later). None: no deadline.
        role_switch: `RoleSwitch` in separate_async: the trainer serves rollouts while it waits.
        on_episode: also called with every finished episode, as it finishes (the attempt
            history).
    """

    def __init__(
        self,
        config: TrainerConfig,
        *,
        tasks: dict[str, TaskSpec],
        driver: RolloutDriver,
        trainer: EmbeddedTrainer,
        engine: Any,
        sampler: TaskSampler,
        recorder: StepRecorder,
        checkpointer: Checkpointer,
        seed: int,
        refill_flat_groups: int = 0,
        pending: Sequence[str] = (),
        launched: int = 0,
        stop_after_steps: int | None = None,
        deadline: float | None = None,
        role_switch: Any = None,
        on_episode: Callable[[RolloutResult], None] | None = None,
    ) -> None:
        self.config = config
        self.tasks = tasks
        self.driver = driver
        self.trainer = trainer
        self.engine = engine
        self.router = engine if isinstance(engine, Router) else None
        pool = getattr(getattr(driver, "sandbox_factory", None), "pool", None)
        self.sandbox_starts = pool.stats if pool is not None else None
        """The run's sandbox starts (`TaskSandboxes.pool`); their counters feed `sandbox/*`."""
        """The rollout router when there are several replicas (its counters feed `router/*`)."""
        self.sampler = sampler
        self.recorder = recorder
        self.checkpointer = checkpointer
        self.seed = seed
        self.stop_after_steps = stop_after_steps
        self.deadline = deadline
        self.stopped_at_deadline: int | None = None
        """The steps trained when the deadline ended the run early (None: it did not)."""
        self.on_episode = on_episode
        self.replay = list(pending)
        self.launched = int(launched)
        """Groups launched over the whole run (their index seeds their episodes)."""
        self.dropped = 0
        self.refill_budget = refill_flat_groups
        """Flat groups one step may replace with newly launched ones (DAPO's dynamic sampling)."""
        self.refilled = 0
        """Groups launched over the whole run to replace flat ones."""
        self.unconsumed: list[str] = []
        """Tasks of finished groups not yet trained on (saved as pending in checkpoints)."""
        self.in_flight: dict[asyncio.Task[_Group], str] = {}
        self.ready: asyncio.Queue[_Group] = asyncio.Queue()
        self.role_switch = role_switch

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
                run_seed=self.seed,
                step=index,
                group_id=f"{task_id}@{index}",
                on_episode=self._observe,
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
        """Feed one finished episode to the sampler (and the run's own observer)."""
        self.sampler.observe(result.task_id, result.reward)
        if self.on_episode is not None:
            self.on_episode(result)

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
            if self.stop_after_steps is None
            else min(total, start_step + self.stop_after_steps)
        )
        asynchronous = self.config.mode in ("colocated_async", "separate_async")
        switch = self.role_switch
        bound = self.config.staleness.max_versions or 0
        per_step = self.config.batch_size
        longest = 0.0
        try:
            for step in range(start_step, last):
                if self._out_of_time(longest, step, start_step):
                    break
                step_started = time.perf_counter()
                routed = vars(self.router.core.counters).copy() if self.router else {}
                starts = vars(self.sandbox_starts).copy() if self.sandbox_starts else {}
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
                sampled = sum(r.sampled_tokens for r in results)
                metrics.update(
                    {
                        "perf/rollout_s": rollout_s,
                        "perf/wait_s": waited,
                        "perf/step_s": elapsed,
                        "perf/sampled_tokens": float(sampled),
                        "perf/tokens_per_s": sampled / elapsed,
                        "train/dropped_stale_groups": float(dropped),
                        "train/refilled_flat_groups": float(len(replaced)),
                        "train/policy_version": float(self.trainer.version),
                    }
                )
                if switch is not None:
                    metrics.update(switch.step_metrics())
                if self.router is not None:
                    metrics.update(router_step_metrics(routed, vars(self.router.core.counters)))
                if self.sandbox_starts is not None:
                    metrics.update(sandbox_step_metrics(starts, vars(self.sandbox_starts)))
                metrics.update(self.sampler.metrics())
                self.recorder.record(step + 1, self.trainer.version, metrics, results)
                longest = max(longest, time.perf_counter() - step_started)
                if self.checkpointer.due(step + 1):
                    self._checkpoint(step + 1)
        finally:
            for job in list(self.in_flight):
                job.cancel()
            if self.in_flight:
                await asyncio.gather(*self.in_flight, return_exceptions=True)

    def _out_of_time(self, longest_step_s: float, step: int, start_step: int) -> bool:
        """Whether the deadline leaves no room for step `step` (as long as the longest so far);
        if so, the steps trained are checkpointed (unless they just were) and recorded."""
        if self.deadline is None or step == start_step:
            return False
        if time.monotonic() + longest_step_s <= self.deadline:
            return False
        self.stopped_at_deadline = step
        if not self.checkpointer.due(step):
            self._checkpoint(step)
        return True

    def _fill(self, step: int, bound: int) -> None:
        """Launch the groups the staleness bound allows by step `step`.

        Groups are trained roughly in launch order, `batch_size` per step, so a group launched
        during step s is trained by step s + bound when at most `(s + bound + 1) * batch_size`
        groups (plus those dropped) have been launched: `wait` launches no more than that. `drop`
        looks one batch further ahead and discards what arrives too old. Neither launches for a
        step after `total_steps`.
        """
        ahead = bound + (2 if self.config.staleness.policy == "drop" else 1)
        # nothing is launched for steps past the run's last: it would only take the cores
        # from the last steps' training and be cancelled
        steps = min(step + ahead, self.config.total_steps)
        allowed = steps * self.config.batch_size + self.dropped + self.refilled
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

    def _checkpoint(self, step: int) -> None:
        self.checkpointer.save(
            step,
            model=self.trainer.model,
            optimizer=self.trainer.optimizer,
            version=self.trainer.version,
            sampler_state=self.sampler.state_dict(),
            pending=self.unconsumed + list(self.in_flight.values()) + self.replay,
            launched=self.launched,
        )
