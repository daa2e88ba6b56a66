"""`agent-rl runs latest`: the newest MLflow run of a recipe, and how it is described."""

from __future__ import annotations

from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker
from uni_agent_core.tracking.runs import describe_run, latest_run

ROOT = Path(__file__).resolve().parents[3]


def test_latest_run_finds_the_newest_run_named_after_the_recipe(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    recipe = load_recipe(
        ROOT / "recipes" / "ci-smoke.yaml",
        [f"tracking.tracking_uri={uri}", "tracking.experiment=runs-test"],
    )
    with pytest.raises(LookupError, match="no MLflow experiment 'runs-test'"):
        latest_run(recipe)
    ids = []
    for reward in (0.25, 0.75):
        tracker = MlflowTracker(recipe.tracking, run_name=recipe.name)
        tracker.log_params({"seed": 0})
        tracker.log_step(1, {"train/reward_mean": reward, "eval/pass@1": reward / 2})
        tracker.finish()
        ids.append(tracker.run_id)
    summary = latest_run(recipe)
    assert summary.run_id == ids[-1] and summary.status == "FINISHED"
    assert summary.metrics["train/reward_mean"] == 0.75
    text = describe_run(summary, "http://127.0.0.1:4200/api")
    assert f"MLflow run {ids[-1]} (FINISHED) in experiment 'runs-test'" in text
    assert text.index("train/reward_mean: 0.75") < text.index("eval/pass_at_1: 0.375")
    assert f"mlflow ui --backend-store-uri {uri}" in text
    assert "Prefect UI: http://127.0.0.1:4200 " in text
    experiment = f"http://127.0.0.1:5000/#/experiments/{summary.experiment_id}"
    assert f"episode traces: {experiment}/runs/{ids[-1]}/evaluations" in text
    assert f"token-level views: `agent-rl view {ids[-1]}`" in text
    tracking = recipe.tracking.model_copy(update={"run_name": "never-trained"})
    other = recipe.model_copy(update={"tracking": tracking})
    with pytest.raises(LookupError, match="no run named 'never-trained'"):
        latest_run(other)
