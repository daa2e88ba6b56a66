"""Clean restarts: a SIGKILLed `agent-rl train` and its rerun leave no sandbox, cgroup, duplicate
metrics row or RUNNING MLflow run of the dead process; a resumed run drops the rows recorded
after its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.rl.run import TrainingRun
from uni_agent_core.sandbox.local import SANDBOX_DIR_PREFIX

ROOT = Path(__file__).resolve().parents[3]
CI_SMOKE = str(ROOT / "recipes" / "ci-smoke.yaml")
SMALL = [
    "trainer.batch_size=1",
    "trainer.group_size=2",
    "trainer.max_concurrent_episodes=2",
    "harness.max_turns=2",
    "gateway.sampling.max_tokens=48",
]


def _steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


def _sandbox_dirs(tmp: Path, pid: int) -> list[Path]:
    return sorted(tmp.glob(f"{SANDBOX_DIR_PREFIX}{pid}-*"))


def _cgroups(pid: int) -> list[str]:
    """Every cgroup directory on this host named after a sandbox of `pid` (`limits.py`)."""
    found = []
    for parent, dirs, _ in os.walk("/sys/fs/cgroup"):
        found += [f"{parent}/{name}" for name in dirs if name.startswith(f"agent-rl-{pid}-")]
    return found


def _train(tmp_path: Path, *overrides: str) -> subprocess.Popen:
    """`agent-rl train` of ci-smoke in its own process, sandboxes under `tmp_path/tmp`."""
    command = [
        sys.executable,
        "-m",
        "uni_agent_core.cli",
        "train",
        "--recipe",
        CI_SMOKE,
        "--run-dir",
        str(tmp_path / "run"),
    ]
    for override in (f"tracking.tracking_uri=sqlite:///{tmp_path}/mlruns.db", *SMALL, *overrides):
        command += ["--set", override]
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.mark.slow
def test_a_rerun_after_sigkill_sweeps_sandboxes_restarts_metrics_and_kills_the_mlflow_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "tmp").mkdir()
    run_dir = tmp_path / "run"
    first = _train(tmp_path, "trainer.total_steps=3")
    deadline = time.monotonic() + 300
    # killed during step 2: step 1 is in metrics.jsonl and step 2's sandboxes are open
    while not (
        (run_dir / "metrics.jsonl").is_file()
        and _steps(run_dir)
        and _sandbox_dirs(tmp_path / "tmp", first.pid)
    ):
        assert first.poll() is None, first.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert _sandbox_dirs(tmp_path / "tmp", first.pid)
    cgroups_before = _cgroups(first.pid)  # empty where no cgroup is writable
    steps_before = _steps(run_dir)

    rerun = _train(tmp_path, "trainer.total_steps=1")
    out = rerun.communicate(timeout=300)[0]
    assert rerun.returncode == 0, out[-3000:]

    assert _sandbox_dirs(tmp_path / "tmp", first.pid) == []
    assert _cgroups(first.pid) == []
    (swept,) = [line for line in out.splitlines() if line.startswith("swept ")]
    assert f"{first.pid}" in swept and ("0 cgroups" in swept) == (not cgroups_before), swept
    assert steps_before[0] == 1 and _steps(run_dir) == [1]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db")
    experiment = client.get_experiment_by_name("agent-rl-ci").experiment_id
    runs = client.search_runs([experiment], order_by=["attributes.start_time ASC"])
    assert [run.info.status for run in runs] == ["KILLED", "FINISHED"]


def test_a_resumed_run_drops_the_rows_recorded_after_its_checkpoint(tmp_path: Path) -> None:
    overrides = [*SMALL, "harness.max_turns=1", "trainer.total_steps=2", "trainer.resume=auto"]
    recipe = load_recipe(CI_SMOKE, overrides)
    run_dir = tmp_path / "run"
    TrainingRun(recipe, run_dir=run_dir, track=False, stop_after_steps=1).run()
    assert _steps(run_dir) == [1]
    # as if killed after recording step 2 but before its checkpoint was complete
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": 2, "stale": 1.0}) + "\n")

    summary = TrainingRun(recipe, run_dir=run_dir, track=False).run()

    assert summary.start_step == 1
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2] and "stale" not in rows[1]


def test_a_new_run_does_not_log_into_a_warm_start_run_an_earlier_attempt_filled(
    tmp_path: Path,
) -> None:
    from uni_agent_core.tracking.mlflow_tracker import WARM_START_RUN_TAG, MlflowTracker

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    overrides = [*SMALL, "harness.max_turns=1", "trainer.total_steps=1"]
    recipe = load_recipe(CI_SMOKE, [*overrides, f"tracking.tracking_uri={uri}"])
    # The warm start's run, into which an earlier (killed) training attempt logged step 1.
    warm = MlflowTracker(recipe.tracking, run_name="warm start")
    warm.log_step(1, {"train/reward_mean": 0.5})

    TrainingRun(recipe, run_dir=tmp_path / "run", mlflow_run_id=warm.run_id).run()

    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(recipe.tracking.experiment).experiment_id
    (fresh,) = [r for r in client.search_runs([experiment]) if r.info.run_id != warm.run_id]
    assert fresh.data.tags[WARM_START_RUN_TAG] == warm.run_id
    steps = client.get_metric_history(fresh.info.run_id, "progress/step")
    assert [int(m.value) for m in steps] == [1], "the new run's step 1 must be logged"
