"""Where a training step's outcome goes: the step loop's two sinks.

`StepRecorder` takes each step's metrics and episodes: one JSON line in `metrics.jsonl`, the
row in the run's summary, a point in the MLflow run (when the run tracks), the progress line,
the sampled episodes as MLflow traces (`tracking/traces.py`), and the step's sampled
trajectories under `trajectories/` with their token-level view (`viewer/`), both also logged to
the MLflow run as the step ends. `Checkpointer` writes a checkpoint
every `checkpoint_interval` steps and at the last one, with the state a resumed run needs
(policy version, sampler position, groups launched but not trained), and prunes old ones.
Neither knows the step loop or the run that owns them.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from uni_agent_core.rl.samples import write_samples
from uni_agent_core.rundir.checkpoint import prune, save_checkpoint
from uni_agent_core.rundir.layout import METRICS, TRAJECTORIES
from uni_agent_core.tracking.traces import EpisodeTracer
from uni_agent_core.types import RolloutResult
from uni_agent_core.viewer.export import write_step_views

logger = logging.getLogger(__name__)


@dataclass
class RunSummary:
    """What a training run did, whichever backend ran it (`rl/launch.py`)."""

    run_dir: Path
    start_step: int
    """Steps already trained when this run started (resumed from a checkpoint)."""
    steps: int
    """Steps this run trained."""
    metrics: list[dict[str, float]] = field(default_factory=list)
    """One row per step (the embedded trainer's `metrics.jsonl`; verl logs its own)."""
    resumed_from: Path | None = None
    backend: str = "embedded"
    mlflow_run_id: str | None = None
    """The MLflow run the steps were logged to (None: untracked, or verl's own run)."""
    stopped_at_deadline: int | None = None
    """The steps trained when the run's time budget ended it early (None: it did not)."""

    @property
    def final(self) -> dict[str, float]:
        """The last step's metrics ({} when none were recorded here)."""
        return self.metrics[-1] if self.metrics else {}


def progress_line(step: int, total: int, version: int, metrics: dict[str, float]) -> str:
    """The line a step prints: reward, pass rate, the update (or why there was none), staleness,
    timings and throughput."""
    if "train/loss" in metrics:
        pearson = metrics.get("train/logprob_pearson", math.nan)
        # measured on tokens sampled at the trainer's version; an async step can have none
        agreement = "n/a" if math.isnan(pearson) else f"{pearson:.5f}"
        update = f"loss {metrics['train/loss']:.4f} pearson {agreement} "
    else:
        update = "no update (every group's rewards are equal: no learning signal) "
    if metrics.get("train/refilled_flat_groups"):
        update += f"refilled {metrics['train/refilled_flat_groups']:.0f} flat groups "
    return (
        f"step {step}/{total} v{version} "
        f"reward {metrics.get('train/reward_mean', 0.0):.3f} "
        f"pass {metrics.get('train/pass_rate', 0.0):.3f} "
        f"{update}"
        f"stale {metrics.get('train/staleness_max', 0.0):.0f} "
        f"rollout {metrics['perf/rollout_s']:.1f}s train {metrics.get('perf/train_s', 0):.1f}s "
        f"{metrics['perf/tokens_per_s']:.0f} tok/s"
    )


class StepRecorder:
    """Writes each step's metrics and trajectories and prints its progress line.

    Args:
        run_dir: the run directory (`metrics.jsonl` and `trajectories/` go there).
        summary: the run's summary; every step's row is appended.
        total_steps: the run's step count (for the progress line).
        echo: where progress lines go.
        tracker: the MLflow run (`log_step(step, metrics)`), or None.
        trajectories_per_step: episodes of each step written to `trajectories/`.
        tokenizer: decodes the written trajectories' text (None writes token ids only).
        tracer: writes the step's sampled episodes as traces of the tracker's run, or None.
    """

    def __init__(
        self,
        run_dir: Path,
        summary: RunSummary,
        *,
        total_steps: int,
        echo: Callable[[str], None],
        tracker: Any = None,
        trajectories_per_step: int = 0,
        tokenizer: Any = None,
        tracer: EpisodeTracer | None = None,
    ) -> None:
        self.metrics_path = run_dir / METRICS
        self.trajectories_dir = run_dir / TRAJECTORIES
        self.summary = summary
        self.total_steps = total_steps
        self.echo = echo
        self.tracker = tracker
        self.trajectories_per_step = trajectories_per_step
        self.tokenizer = tokenizer
        self.tracer = tracer
        self._clock: tuple[int, float] | None = None
        """The first step this recorder saw and when it started: the ETA's rate."""

    def _eta(self, step: int, metrics: dict[str, float]) -> str:
        """` ETA S s` for the steps left, at this process's mean step time so far (the first
        step's own `perf/step_s` starts the clock)."""
        now = time.monotonic()
        if self._clock is None:
            self._clock = (step - 1, now - metrics.get("perf/step_s", 0.0))
        first, started = self._clock
        done, left = step - first, self.total_steps - step
        if done <= 0 or left <= 0:
            return ""
        return f" ETA {(now - started) / done * left:.0f} s"

    def record(
        self,
        step: int,
        version: int,
        metrics: dict[str, float],
        results: Sequence[RolloutResult],
    ) -> None:
        row = {"step": step, **{key: round(value, 6) for key, value in metrics.items()}}
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        self.summary.metrics.append(row)
        # A step replayed after a resume is in MLflow already: it is not traced twice.
        fresh = self.tracker is not None and self.tracker.log_step(step, metrics)
        self.summary.steps += 1
        line = progress_line(step, self.total_steps, version, metrics)
        self.echo(line + self._eta(step, metrics))
        traces = self.tracer.trace_step(step, results) if fresh and self.tracer else {}
        written = write_samples(
            list(results),
            step,
            self.trajectories_dir,
            self.trajectories_per_step,
            self.tokenizer,
            traces,
        )
        if written is None:
            return
        trace_url = self.tracer.trace_link if self.tracer is not None else None
        (view,) = write_step_views(self.trajectories_dir, trace_url=trace_url, steps=[step])
        if fresh:
            for path in (written, view):
                self.tracker.log_artifact(path, TRAJECTORIES)


class Checkpointer:
    """Saves the trainer, the sampler's position and the pending groups on schedule.

    Args:
        directory: the run's checkpoint directory.
        interval: save every `interval` steps (and at `total_steps`).
        total_steps: the run's last step.
        keep: checkpoints kept after pruning; None keeps all.
        run_name: recorded in each checkpoint (the recipe's name).
        mlflow_run_id: the run's MLflow run, recorded so a resumed run logs into it.
    """

    def __init__(
        self,
        directory: Path,
        *,
        interval: int,
        total_steps: int,
        keep: int | None,
        run_name: str,
        mlflow_run_id: str | None = None,
    ) -> None:
        self.directory = directory
        self.interval = interval
        self.total_steps = total_steps
        self.keep = keep
        self.run_name = run_name
        self.mlflow_run_id = mlflow_run_id

    def due(self, step: int) -> bool:
        return step % self.interval == 0 or step == self.total_steps

    def save(
        self,
        step: int,
        *,
        model: Any,
        optimizer: Any,
        version: int,
        sampler_state: dict[str, Any],
        pending: list[str],
        launched: int,
    ) -> Path:
        state = {
            "version": version,
            "sampler": sampler_state,
            "pending": pending,
            "launched": launched,
            "curriculum": None,
            "recipe": self.run_name,
            "mlflow_run_id": self.mlflow_run_id,
        }
        path = save_checkpoint(self.directory, step, model=model, optimizer=optimizer, state=state)
        prune(self.directory, self.keep)
        logger.info("checkpoint %s", path)
        return path
