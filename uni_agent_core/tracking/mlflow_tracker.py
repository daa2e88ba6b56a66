"""An MLflow run for a training run: params once, metrics per step, artifacts, resumable.

`MlflowTracker` opens (or, given the id stored in a checkpoint, reopens) one MLflow run under the
recipe's experiment and tracking URI. Metrics are logged per step under their agent-rl names
(`train/...`, `perf/...`, `curriculum/...`; `@`, which MLflow refuses, becomes `_at_`, so
`eval/pass@1` is `eval/pass_at_1`); a step already logged — a retried write, or steps
replayed after a resume — is skipped, so MLflow never holds two points for one step. A training
run's tracker is given its run directory: the run is tagged with it and with the process that
owns it (pid and host), so a later run of that directory can tell a dead owner's `RUNNING` run
(`dead_runs.py`). MLflow is imported lazily (it takes seconds).
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from uni_agent_core.config.evaluation import TrackingConfig

RUN_DIR_TAG = "agent_rl.run_dir"
"""The run directory (absolute) of a training run's MLflow run."""
OWNER_PID_TAG = "agent_rl.owner_pid"
"""The pid of the process that last opened the run."""
OWNER_HOST_TAG = "agent_rl.owner_host"
"""The host name of that process."""
WARM_START_RUN_TAG = "agent_rl.warm_start_run"
"""The warm start's MLflow run, on a training run that could not continue it."""
_PROGRESS_KEY = "progress/step"
_MAX_PARAM_CHARS = 500


def metric_name(name: str) -> str:
    """An agent-rl metric name as MLflow accepts it (`@` is not allowed: `pass@1` ->
    `pass_at_1`)."""
    return name.replace("@", "_at_")


_PARAMS_PER_BATCH = 100
"""MLflow refuses a `log_batch` with more params than this."""


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mappings as dotted keys with string values (MLflow params)."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            flat[name] = text[:_MAX_PARAM_CHARS]
    return flat


def steps_logged(config: TrackingConfig, run_id: str) -> int:
    """The last training step whose metrics the MLflow run `run_id` holds (0 for none)."""
    import mlflow

    return _last_step(mlflow.MlflowClient(tracking_uri=config.tracking_uri), run_id)


def run_exists(config: TrackingConfig, run_id: str) -> bool:
    """Whether the tracking store of `config` holds the MLflow run `run_id` (a run recorded
    in a run directory is gone when the store was deleted or the recipe points elsewhere)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        mlflow.MlflowClient(tracking_uri=config.tracking_uri).get_run(run_id)
    except MlflowException:
        return False
    return True


def _last_step(client: Any, run_id: str) -> int:
    history = client.get_metric_history(run_id, _PROGRESS_KEY)
    return max((int(m.value) for m in history), default=0)


class MlflowTracker:
    """One MLflow run; safe to resume."""

    def __init__(
        self,
        config: TrackingConfig,
        *,
        run_name: str,
        run_id: str | None = None,
        run_dir: Path | None = None,
    ) -> None:
        """Args:
        config: the recipe's tracking section.
        run_name: the MLflow run name (unless `config.run_name` names one).
        run_id: reopen this run (a resumed training run's); None creates one.
        run_dir: the training run's directory; tags the run with it and with this process as
            its owner.
        """
        import mlflow

        self._mlflow = mlflow
        mlflow.set_tracking_uri(config.tracking_uri)
        self.client = mlflow.MlflowClient(tracking_uri=config.tracking_uri)
        experiment = self.client.get_experiment_by_name(config.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(config.experiment)
        )
        self.experiment_id: str = experiment_id
        if run_id is not None:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            run = self.client.create_run(experiment_id, run_name=config.run_name or run_name)
            self.run_id = run.info.run_id
        if run_dir is not None:
            from mlflow.entities import RunTag

            owner = {
                RUN_DIR_TAG: str(run_dir.resolve()),
                OWNER_PID_TAG: str(os.getpid()),
                OWNER_HOST_TAG: socket.gethostname(),
            }
            tags = [RunTag(key, value) for key, value in owner.items()]
            self.client.log_batch(self.run_id, tags=tags)
        self.logged_up_to = _last_step(self.client, self.run_id)
        """The last step whose metrics are in MLflow."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        existing = self.client.get_run(self.run_id).data.params
        fresh = {k: v for k, v in flatten(params).items() if k not in existing}
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in fresh.items()]
        for start in range(0, len(items), _PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + _PARAMS_PER_BATCH])

    def log_step(self, step: int, metrics: Mapping[str, float]) -> bool:
        """Log one step's metrics; returns False (and logs nothing) for an already logged step."""
        if step <= self.logged_up_to:
            return False
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        points = [
            Metric(metric_name(key), float(value), timestamp, step)
            for key, value in metrics.items()
            if isinstance(value, int | float) and math.isfinite(float(value))
        ]
        points.append(Metric(_PROGRESS_KEY, float(step), timestamp, step))
        self.client.log_batch(self.run_id, metrics=points)
        self.logged_up_to = step
        return True

    def log_values(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log metrics at `step` without touching step progress (e.g. `eval/...` of the
        checkpoint written at that step); a key already logged at that step is skipped."""
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        points = []
        for key, value in metrics.items():
            name = metric_name(key)
            history = self.client.get_metric_history(self.run_id, name)
            if any(m.step == step for m in history) or not math.isfinite(float(value)):
                continue
            points.append(Metric(name, float(value), timestamp, step))
        if points:
            self.client.log_batch(self.run_id, metrics=points)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)
