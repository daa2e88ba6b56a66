"""The `agent-rl` flow end to end on ci-smoke, and its fail-fast on bad input."""

import shutil
from pathlib import Path

import mlflow
import pytest

ROOT = Path(__file__).resolve().parents[2]
CI_SMOKE = str(ROOT / "recipes" / "ci-smoke.yaml")
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


def _local(tmp_path) -> tuple[str, list[str]]:
    """MLflow in `tmp_path` and the sandboxes this machine allows: the URI and overrides."""
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    return uri, [
        f"tracking.tracking_uri={uri}",
        f"sandbox.isolation={ISOLATION}",
        "eval.max_tasks=2",
    ]


def test_bad_recipes_fail_before_any_stage(prefect_server, tmp_path, monkeypatch) -> None:
    from flows.train import train

    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match="No such file|not found|does not exist"):
        train(recipe=str(tmp_path / "missing.yaml"))
    with pytest.raises(Exception, match="trainer.group_sizee"):
        train(recipe=CI_SMOKE, overrides=["trainer.group_sizee=2"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_train_flow_runs_every_stage_into_one_mlflow_run(
    prefect_server, tmp_path, monkeypatch
) -> None:
    """Validation, the warm start, the evaluation before RL, 2 RL steps and the evaluation of
    each checkpoint, all logged to one MLflow run; a rerun reuses all of it."""
    from flows.train import train

    monkeypatch.chdir(tmp_path)
    uri, overrides = _local(tmp_path)
    overrides += [
        "eval.before_training=true",
        "warm_start.enabled=true",
        "warm_start.epochs=1",
        "warm_start.tasks=2",
        "trainer.keep_checkpoints=2",
    ]
    result = train(recipe=CI_SMOKE, overrides=overrides)
    run_dir = tmp_path / "runs" / "ci-smoke"
    assert result["steps"] == 2
    assert (run_dir / "validation" / "validation.md").is_file()
    assert (run_dir / "checkpoints" / "step-000002" / "manifest.json").is_file()
    warm = run_dir / "warm_start"
    assert result["warm_start"]["trajectories"] >= 1
    assert (warm / "policy" / "config.json").is_file() and (warm / "nll.png").is_file()
    assert result["eval_before"]["eval/pass@1"] >= 0.0 and result["eval"]["eval/pass@1"] >= 0.0
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(result["mlflow_run_id"])
    metrics = run.data.metrics
    assert {"warm_start/nll", "eval_before/pass_at_1", "eval/pass_at_1"} <= set(metrics)
    assert metrics["eval/pass_at_1_delta"] == pytest.approx(
        metrics["eval/pass_at_1"] - metrics["eval_before/pass_at_1"]
    )
    low, high = metrics["eval/pass_at_1_delta_ci_low"], metrics["eval/pass_at_1_delta_ci_high"]
    assert low <= metrics["eval/pass_at_1_delta"] <= high and metrics["eval/paired_tasks"] == 2
    assert result["before_after"]["verdict"].endswith("noise")
    flips = {a.path for a in client.list_artifacts(run.info.run_id, "eval")}
    assert {"eval/flips.csv", "eval/flips.md"} <= flips
    rows = (run_dir / "eval" / "before-after" / "flips.csv").read_text().splitlines()
    assert len(rows) == 1 + 2  # the header and every paired task
    assert run.data.params["policy.name"] == f"hf:{(warm / 'policy').resolve()}"
    assert "train/reward_mean" in metrics
    # the policy RL starts from (step 0) and every checkpoint (eval.every_n_checkpoints: 1) are
    # scored on the same held-out tasks
    assert [step for step, _ in result["heldout_curve"]] == [0, 1, 2]
    history = client.get_metric_history(run.info.run_id, "eval/pass_at_1")
    assert sorted(m.step for m in history) == [1, 2]
    assert (run_dir / "eval" / "micro-swe-test-step-000001" / "eval.json").is_file()
    assert "eval/heldout_curve.png" in flips
    command = run.data.params["repro.command"]
    assert command.startswith(f"python -m flows.train {CI_SMOKE} tracking.tracking_uri=")
    folders = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"warm_start", "validation", "metrics.jsonl"} <= folders
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "warm_start/nll")]
    assert steps == list(range(1, len(steps) + 1))
    # a rerun reuses the finished warm start and the run
    again = train(recipe=CI_SMOKE, overrides=overrides)
    assert again["mlflow_run_id"] == result["mlflow_run_id"]
