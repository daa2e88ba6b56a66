"""The on-demand flows: evaluate a checkpoint, compare runs."""

import shutil
from pathlib import Path

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker

ROOT = Path(__file__).resolve().parents[2]
CI_SMOKE = str(ROOT / "recipes" / "ci-smoke.yaml")
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


def test_evaluate_flow_scores_the_base_policy(prefect_server, tmp_path, monkeypatch) -> None:
    from flows.evaluate import evaluate

    monkeypatch.chdir(tmp_path)
    result = evaluate(
        recipe=CI_SMOKE,
        checkpoint="none",
        overrides=[f"sandbox.isolation={ISOLATION}", "eval.max_tasks=1"],
    )
    assert result["step"] == 0 and result["metrics"]["eval/tasks"] == 1.0
    assert (Path(result["report_dir"]) / "report.md").is_file()


def test_compare_flow_publishes_table_and_plot(prefect_server, tmp_path) -> None:
    from flows.compare import compare_flow

    config = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="c")
    ids = []
    for name in ("first", "second"):
        tracker = MlflowTracker(config, run_name=name)
        tracker.log_params({"recipe": "r", "seed": len(ids)})
        tracker.log_step(1, {"train/reward_mean": 0.5 + len(ids)})
        tracker.finish()
        ids.append(tracker.run_id)
    result = compare_flow(
        run_ids=ids, tracking_uri=config.tracking_uri, plot=str(tmp_path / "c.png")
    )
    assert Path(result["plot"]).is_file() and "| seed | 0 | 1 |" in result["markdown"]
