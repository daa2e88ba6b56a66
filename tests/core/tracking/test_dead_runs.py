"""MLflow runs of a run directory whose process died: tagged with their owner at start, marked
KILLED by the next run of that directory; live, finished, other hosts' and other directories'
runs are left as they are."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import mlflow

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.tracking.dead_runs import mark_dead_runs_killed
from uni_agent_core.tracking.mlflow_tracker import (
    OWNER_HOST_TAG,
    OWNER_PID_TAG,
    RUN_DIR_TAG,
    MlflowTracker,
)


def test_a_run_is_tagged_with_its_directory_and_owner(tmp_path: Path) -> None:
    config = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="t")
    tracker = MlflowTracker(config, run_name="r", run_dir=tmp_path / "run")
    tags = mlflow.MlflowClient(config.tracking_uri).get_run(tracker.run_id).data.tags
    assert tags[RUN_DIR_TAG] == str((tmp_path / "run").resolve())
    assert tags[OWNER_PID_TAG] == str(os.getpid())
    assert tags[OWNER_HOST_TAG] == socket.gethostname()


def test_a_rerun_marks_the_dead_runs_of_its_directory_killed(
    tmp_path: Path, dead_pid: int, live_pid: int
) -> None:
    config = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="t")
    client = mlflow.MlflowClient(config.tracking_uri)
    run_dir, other_dir = tmp_path / "run", tmp_path / "other"

    def opened(directory: Path, pid: int, host: str | None = None) -> str:
        tracker = MlflowTracker(config, run_name="r", run_dir=directory)
        client.set_tag(tracker.run_id, OWNER_PID_TAG, str(pid))
        if host is not None:
            client.set_tag(tracker.run_id, OWNER_HOST_TAG, host)
        return tracker.run_id

    killed = opened(run_dir, dead_pid)
    resumed = opened(run_dir, dead_pid)  # the run a resume reopens is not marked
    live = opened(run_dir, live_pid)
    elsewhere = opened(other_dir, dead_pid)
    other_host = opened(run_dir, dead_pid, host="another-host.invalid")
    finished = opened(run_dir, dead_pid)
    client.set_terminated(finished, "FINISHED")
    untagged = client.create_run(client.get_experiment_by_name("t").experiment_id).info.run_id

    assert mark_dead_runs_killed(config, run_dir, keep=resumed) == [killed]

    status = {run: client.get_run(run).info.status for run in (killed, resumed, live)}
    assert status == {killed: "KILLED", resumed: "RUNNING", live: "RUNNING"}
    for run in (elsewhere, other_host, untagged):
        assert client.get_run(run).info.status == "RUNNING"
    assert client.get_run(finished).info.status == "FINISHED"
    assert mark_dead_runs_killed(config, run_dir) == [resumed]


def test_no_experiment_yet_means_nothing_to_mark(tmp_path: Path) -> None:
    config = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="none")
    assert mark_dead_runs_killed(config, tmp_path) == []
