"""MLflow runs left `RUNNING` by a training process that died (SIGKILL, OOM, a lost machine).

A process killed that way never ends its MLflow run. Each training run's MLflow run carries its
run directory and its owner's pid and host as tags (`mlflow_tracker.py`);
`mark_dead_runs_killed`, called when a run of a directory opens its tracker (`rl/run.py`), ends
as `KILLED` every `RUNNING` run of that directory whose owner, on this host, is no longer alive.
A run owned on another host, or without owner tags, cannot be judged from here and is left.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.sandbox.sweep import owner_alive
from uni_agent_core.tracking.mlflow_tracker import OWNER_HOST_TAG, OWNER_PID_TAG, RUN_DIR_TAG


def mark_dead_runs_killed(
    config: TrackingConfig, run_dir: Path, *, keep: str | None = None
) -> list[str]:
    """Ends as `KILLED` the `RUNNING` MLflow runs of `run_dir` whose owner process is dead.

    Args:
        config: the recipe's tracking section (URI and experiment searched).
        run_dir: the run directory whose runs are checked.
        keep: a run left as it is (the one a resumed run reopens at once).

    Returns:
        The ids of the runs marked, oldest first.
    """
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=config.tracking_uri)
    experiment = client.get_experiment_by_name(config.experiment)
    if experiment is None:
        return []
    # Filtered here, not in the query: a path would have to be quoted for MLflow's filter syntax.
    running = client.search_runs(
        [experiment.experiment_id],
        filter_string="attributes.status = 'RUNNING'",
        order_by=["attributes.start_time ASC"],
    )
    directory, host = str(run_dir.resolve()), socket.gethostname()
    marked = []
    for run in running:
        tags = run.data.tags
        pid = tags.get(OWNER_PID_TAG, "")
        if (
            run.info.run_id == keep
            or tags.get(RUN_DIR_TAG) != directory
            or tags.get(OWNER_HOST_TAG) != host
            or not pid.isdigit()
            or int(pid) == os.getpid()
            or owner_alive(int(pid))
        ):
            continue
        client.set_terminated(run.info.run_id, status="KILLED")
        marked.append(run.info.run_id)
    return marked
