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
- `separate_async`: the rollout replicas (`router.replicas`) keep generating while the trainer
  trains, as above; while the trainer waits for its next batch it lends its own model to the
  router as one more replica and reclaims it when the batch is ready (role switching,
  `role_switch.py`).

Per step it appends one JSON line to `<run dir>/metrics.jsonl` and prints a progress line; the
checkpoint (every `checkpoint_interval` steps and at the end) records the sampler cursor and
the groups launched but not trained, which a resumed run launches first. A new run starts
`metrics.jsonl` afresh; a resumed one keeps its rows up to the checkpoint's step
(`rundir/rewind.py`). An MLflow run of the same run directory left `RUNNING` by a process that
died is marked `KILLED` when the tracker opens (`tracking/dead_runs.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uni_agent_core.config.backend import EmbeddedBackendConfig
from uni_agent_core.config.inference import HFEngineConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.curriculum.history import Attempt, AttemptHistory
from uni_agent_core.curriculum.sampler import DynamicSampler
from uni_agent_core.curriculum.task_sampler import EpochSampler
from uni_agent_core.models.precision_choice import DtypeChoice, resolve_dtype
from uni_agent_core.rl.role_switch import RoleSwitch, TrainerReplica
from uni_agent_core.rl.step_loop import StepLoop
from uni_agent_core.rl.step_records import Checkpointer, RunSummary, StepRecorder
from uni_agent_core.rl.trainer import EmbeddedTrainer
from uni_agent_core.rollout.build import build_tasks
from uni_agent_core.rollout.driver import RolloutDriver
from uni_agent_core.rollout.stack import episode_concurrency, rollout_stack
from uni_agent_core.rundir.checkpoint import latest_complete, restore_checkpoint
from uni_agent_core.rundir.layout import (
    CURVES,
    HISTORY_SNAPSHOT,
    METRICS,
    PRECISION,
    RESOLVED_RECIPE,
    TRAJECTORIES,
    checkpoint_dir,
    default_run_dir,
    history_path,
    write_resolved_recipe,
)
from uni_agent_core.rundir.rewind import rewind_step_records
from uni_agent_core.tracking.traces import EpisodeTracer
from uni_agent_core.types import RolloutResult, TaskSpec

logger = logging.getLogger(__name__)


class TrainingRun:
    """One training run of a recipe on this machine (embedded trainer)."""

    def __init__(
        self,
        recipe: Recipe,
        *,
        run_dir: Path | None = None,
        echo: Callable[[str], None] = print,
        stop_after_steps: int | None = None,
        time_budget_s: float | None = None,
        driver_class: type[RolloutDriver] = RolloutDriver,
        track: bool = True,
        tasks: Sequence[TaskSpec] | None = None,
        mlflow_run_id: str | None = None,
        launch_command: str | None = None,
    ) -> None:
        """Args:
        recipe: the validated recipe.
        run_dir: where metrics and (by default) checkpoints go; default `runs/<name>`.
        echo: receives one progress line per step.
        stop_after_steps: end the process's work after this many steps (tests of resume).
        time_budget_s: end at a step boundary, checkpointed, rather than run past this many
            seconds from the call of `run` (a benchmark's wall-clock limit); None: no limit.
        driver_class: the rollout driver (a subclass can post-process episodes).
        track: log params, per-step metrics and artifacts to MLflow (`recipe.tracking`).
        tasks: the tasks to train on (e.g. those that passed data validation, loaded once by
            the caller); None builds the recipe's task set.
        mlflow_run_id: the MLflow run to log into when no checkpoint names one (the run an
            earlier stage, such as the warm start, opened); None creates one.
        launch_command: the command that started the run, for its reproducibility record
            (the flow's deployment run); None records this process's command line.
        """
        if recipe.trainer.backend.type != "embedded":
            raise ValueError(
                "trainer.backend.type: `agent-rl train` runs the embedded trainer; verl recipes "
                "launch through the verl launcher"
            )
        self.recipe = recipe
        self.run_dir = run_dir or default_run_dir(recipe)
        self.checkpoint_dir = checkpoint_dir(recipe, self.run_dir)
        self.echo = echo
        self.stop_after_steps = stop_after_steps
        self.time_budget_s = time_budget_s
        self.seed = recipe.trainer.seed if recipe.trainer.seed is not None else recipe.seed
        self.driver_class = driver_class
        self.history: AttemptHistory | None = None
        """The attempt history when the curriculum is enabled."""
        self.track = track
        self._tasks: dict[str, TaskSpec] = {}
        self.tokenizer: Any = None
        self.given_tasks = None if tasks is None else list(tasks)
        self.tracker: Any = None
        self.mlflow_run_id = mlflow_run_id
        self.launch_command = launch_command

    # -- building ------------------------------------------------------------------------------

    def _build(self) -> tuple[dict[str, TaskSpec], EmbeddedTrainer]:
        from uni_agent_core.inference.builder import resolve_device
        from uni_agent_core.models import load_policy

        recipe, trainer_config = self.recipe, self.recipe.trainer
        random.seed(self.seed)
        np.random.seed(self.seed % 2**32)
        torch.manual_seed(self.seed)
        chosen = self.given_tasks if self.given_tasks is not None else build_tasks(recipe)
        tasks = {task.instance_id: task for task in chosen}
        if not tasks:
            raise ValueError("no task left to train on (every task was filtered out)")
        backend = trainer_config.backend
        assert isinstance(backend, EmbeddedBackendConfig)  # checked in __init__
        # The trainer's master weights are float32 whatever the compute dtype (precision.py).
        device = resolve_device(backend.device)
        model, tokenizer = load_policy(
            recipe.policy.name,
            dtype="float32",
            device=device,
            chat_template=recipe.policy.chat_template,
        )
        self.tokenizer = tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        trainer = EmbeddedTrainer(
            model,
            trainer_config,
            pad_token_id=pad,
            drop_zero_variance_groups=recipe.curriculum.drop_zero_variance_groups,
            micro_batch_tokens=backend.micro_batch_tokens,
            temperature=recipe.gateway.sampling.temperature or 1.0,
            gradient_checkpointing=backend.gradient_checkpointing,
            shared_prefix=backend.shared_prefix,
            compute_dtype=resolve_dtype(recipe.policy.dtype, recipe.policy.name, device),
            trainable_layers=backend.trainable_layers,
        )
        return tasks, trainer

    # -- running -------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        """Train to `total_steps` (or `stop_after_steps`); blocking."""
        return asyncio.run(self.run_async())

    async def run_async(self) -> RunSummary:
        deadline = None if self.time_budget_s is None else time.monotonic() + self.time_budget_s
        tasks, trainer = self._build()
        trainer_config = self.recipe.trainer
        sampler = self._sampler(sorted(tasks))
        start_step, pending, resumed, launched = 0, [], None, 0
        mlflow_run = self.mlflow_run_id
        if trainer_config.resume == "auto":
            checkpoint = latest_complete(self.checkpoint_dir)
            if checkpoint is not None:
                restore_checkpoint(checkpoint, model=trainer.model, optimizer=trainer.optimizer)
                trainer.weights_restored()
                trainer.version = int(checkpoint.state["version"])
                sampler.load_state_dict(checkpoint.state["sampler"])
                pending = list(checkpoint.state.get("pending", []))
                launched = int(checkpoint.state.get("launched", 0)) - len(pending)
                start_step, resumed = checkpoint.step, checkpoint.path
                mlflow_run = checkpoint.state.get("mlflow_run_id") or mlflow_run
                self.echo(f"resuming from {checkpoint.path} (step {checkpoint.step})")
        self._rewind(start_step, resumed=resumed is not None)
        write_resolved_recipe(self.recipe, self.run_dir)
        summary = RunSummary(self.run_dir, start_step, 0, resumed_from=resumed)
        concurrency = episode_concurrency(self.recipe)
        self._tasks = tasks
        if self.track:
            self._open_tracker(mlflow_run, len(tasks), resumed=resumed is not None)
        status = "FAILED"
        try:
            lendable = self._trainer_replica(trainer)
            async with rollout_stack(
                self.recipe,
                max_concurrency=concurrency,
                driver_class=self.driver_class,
                lendable=lendable,
            ) as stack:
                if trainer.version:
                    await stack.engine.update_weights(trainer.engine_state(), trainer.version)
                role_switch = None
                if lendable is not None:
                    role_switch = RoleSwitch(stack.engine, stack.engine.engines.index(lendable))
                recipe = self.recipe
                loop = StepLoop(
                    trainer_config,
                    tasks=tasks,
                    driver=stack.driver,
                    trainer=trainer,
                    engine=stack.engine,
                    sampler=sampler,
                    recorder=StepRecorder(
                        self.run_dir,
                        summary,
                        total_steps=trainer_config.total_steps,
                        echo=self.echo,
                        tracker=self.tracker,
                        trajectories_per_step=recipe.tracking.log_trajectories_per_step,
                        tokenizer=self.tokenizer,
                        tracer=(
                            EpisodeTracer.for_tracker(self.tracker, recipe.tracking, self.tokenizer)
                            if self.tracker is not None
                            else None
                        ),
                    ),
                    checkpointer=Checkpointer(
                        self.checkpoint_dir,
                        interval=trainer_config.checkpoint_interval,
                        total_steps=trainer_config.total_steps,
                        keep=trainer_config.keep_checkpoints,
                        run_name=recipe.name,
                        mlflow_run_id=self.tracker.run_id if self.tracker else None,
                    ),
                    seed=self.seed,
                    refill_flat_groups=recipe.curriculum.refill_flat_groups,
                    pending=pending,
                    launched=launched,
                    stop_after_steps=self.stop_after_steps,
                    deadline=deadline,
                    role_switch=role_switch,
                    on_episode=self._record_attempt if self.history is not None else None,
                )
                await loop.run(start_step)
                summary.stopped_at_deadline = loop.stopped_at_deadline
                if loop.stopped_at_deadline is not None:
                    self.echo(
                        f"time budget of {self.time_budget_s:.0f} s reached: stopped after step "
                        f"{loop.stopped_at_deadline} of {trainer_config.total_steps} "
                        "(checkpointed; a rerun resumes)"
                    )
            status = "FINISHED"
        finally:
            self._close_tracker(status)
        return summary

    def _rewind(self, start_step: int, *, resumed: bool) -> None:
        """The run directory's step records as of `start_step`: none for a new run."""
        dropped = rewind_step_records(self.run_dir, start_step)
        if dropped and resumed:
            self.echo(f"dropped {dropped} metrics rows recorded after step {start_step}")
        elif dropped:
            self.echo(f"a new run: dropped the {dropped} metrics rows of an earlier run here")

    def _record_attempt(self, result: RolloutResult) -> None:
        """One finished episode into the attempt history (the curriculum's record)."""
        assert self.history is not None
        self.history.record(
            [
                Attempt(
                    task_id=result.task_id,
                    reward=result.reward,
                    policy_version=result.oldest_version or result.started_version,
                    run_id=self.recipe.name,
                    exit_reason=result.exit_reason.value,
                )
            ]
        )

    def _trainer_replica(self, trainer: EmbeddedTrainer) -> TrainerReplica | None:
        """separate_async: the trainer's model as a lendable rollout replica (role switching)."""
        recipe = self.recipe
        if recipe.trainer.mode != "separate_async" or not recipe.trainer.backend.role_switching:
            return None
        engine = recipe.engine
        # Beside remote servers (`openai_server`) the trainer's replica is still an in-process
        # engine: it takes the in-process engine's default batch size and prefix cache.
        local = engine if isinstance(engine, HFEngineConfig) else HFEngineConfig()
        return TrainerReplica(
            trainer.compute_model,
            self.tokenizer,
            max_batch_size=local.max_batch_size,
            prefix_cache_tokens=local.prefix_cache_tokens,
            max_model_len=engine.max_model_len,
            policy_version=trainer.version,
        )

    def _open_tracker(self, run_id: str | None, task_count: int, *, resumed: bool) -> None:
        """Opens the run's MLflow run: the checkpoint's when resumed, else the warm start's
        (`run_id`) unless an earlier, unresumed training attempt already logged steps there,
        in which case a new run linked to it by `agent_rl.warm_start_run`."""
        from uni_agent_core.tracking.dead_runs import mark_dead_runs_killed
        from uni_agent_core.tracking.mlflow_tracker import (
            WARM_START_RUN_TAG,
            MlflowTracker,
            steps_logged,
        )

        recipe = self.recipe
        keep = run_id if resumed else None
        for dead in mark_dead_runs_killed(recipe.tracking, self.run_dir, keep=keep):
            self.echo(f"MLflow run {dead} of this run directory lost its process: marked KILLED")
        warm_start_run = None
        if run_id is not None and not resumed and steps_logged(recipe.tracking, run_id):
            self.echo(
                f"MLflow run {run_id} holds the steps of an earlier training attempt; this new "
                "run logs to a new MLflow run"
            )
            warm_start_run, run_id = run_id, None
        self.tracker = MlflowTracker(
            recipe.tracking, run_name=recipe.name, run_id=run_id, run_dir=self.run_dir
        )
        if warm_start_run is not None:
            self.tracker.client.set_tag(self.tracker.run_id, WARM_START_RUN_TAG, warm_start_run)
        self.tracker.log_params(
            {
                "recipe": recipe.name,
                "seed": self.seed,
                "task_count": task_count,
                **recipe.model_dump(mode="json"),
            }
        )
        self.tracker.log_artifact(self.run_dir / RESOLVED_RECIPE)
        precision = self.run_dir / PRECISION
        if precision.is_file():  # the dtype `auto` chose here, its rates and reason
            choice = DtypeChoice.from_json(json.loads(precision.read_text()))
            self.tracker.log_params({"precision": choice.params()})
            self.tracker.log_artifact(precision)
        from uni_agent_core.tracking.reproducibility import reproducibility_record

        record = reproducibility_record(
            recipe, list(self._tasks.values()), command=self.launch_command
        )
        self.tracker.log_params({"repro": record})

    def _close_tracker(self, status: str) -> None:
        tracker = self.tracker
        if tracker is None:
            return
        metrics = self.run_dir / METRICS
        if metrics.is_file():
            tracker.log_artifact(metrics)
            tracker.log_artifact(self._plot(metrics), "plots")
        if self.history is not None:
            tracker.log_artifact(self.history.snapshot(self.run_dir / HISTORY_SNAPSHOT))
        samples = self.run_dir / TRAJECTORIES
        if samples.is_dir():  # each step's were logged as it ended; this catches any missed
            tracker.log_artifact(samples)
        final = latest_complete(self.checkpoint_dir)
        if status == "FINISHED" and final is not None:
            tracker.log_artifact(final.path, f"checkpoint/{final.path.name}")
        tracker.finish(status)

    def _plot(self, metrics: Path) -> Path:
        """Reward, pass-rate and loss curves of this run (PNG)."""
        from uni_agent_core.tracking.plots import plot_curves

        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        keys = ("train/reward_mean", "train/pass_rate", "train/loss")
        series = {
            self.recipe.name: {
                key: [(row["step"], row[key]) for row in rows if key in row] for key in keys
            }
        }
        return plot_curves(series, keys, self.run_dir / CURVES, self.recipe.name)

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
