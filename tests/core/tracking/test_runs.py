"""`agent-rl runs latest`: the newest MLflow run of a recipe, and how it is described."""

from __future__ import annotations

from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker
from uni_agent_core.tracking.runs import (
    before_after_lines,
    curve_line,
    describe_run,
    latest_run,
    noise_verdict,
)

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


def test_the_before_after_lines_state_the_interval_in_words_and_the_exit_reasons() -> None:
    metrics = {
        "eval_before/pass_at_1": 0.2,
        "eval/pass_at_1": 0.5,
        "eval/pass_at_1_delta": 0.3,
        "eval/pass_at_1_delta_ci_low": 0.1,
        "eval/pass_at_1_delta_ci_high": 0.5,
        "eval/paired_tasks": 10.0,
        "eval_before/samples": 10.0,
        "eval/samples": 10.0,
        "eval_before/exit/max_turns": 0.8,
        "eval_before/exit/submitted": 0.2,
        "eval/exit/submitted": 0.9,
        "eval/exit/test_timeout": 0.1,
    }
    lines = before_after_lines(metrics)
    assert lines[0] == "held-out pass@1: 0.200 before RL -> 0.500 after RL"
    assert lines[1] == (
        "pass@1 delta +30.0 points, 95% paired bootstrap interval [+10.0, +50.0] over 10 tasks: "
        "a gain beyond noise"
    )
    assert "| max_turns | 8 | 0 |" in lines and "| test_timeout | 0 | 1 |" in lines
    assert "| submitted | 2 | 9 |" in lines
    assert noise_verdict(-0.4, -0.1) == "a loss beyond noise"
    assert noise_verdict(-0.1, 0.2) == "not distinguishable from noise"
    assert before_after_lines({"eval/pass_at_1": 0.5}) == []


def test_the_heldout_curve_is_read_from_the_runs_evaluations(tmp_path: Path) -> None:
    """The starting policy at step 0, then each scored checkpoint at its step; a point logged
    twice (a rerun of the flow) counts once."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml", [f"tracking.tracking_uri={uri}"])
    tracker = MlflowTracker(recipe.tracking, run_name=recipe.name)
    tracker.log_values(0, {"eval_before/pass@1": 0.25})
    for step, score in ((4, 0.375), (8, 0.5), (8, 0.5)):
        tracker.log_values(step, {"eval/pass@1": score})
    tracker.finish()
    summary = latest_run(recipe)
    assert summary.heldout_curve == [(0, 0.25), (4, 0.375), (8, 0.5)]
    assert curve_line(summary.heldout_curve) == (
        "held-out pass@1 by RL step (same tasks): 0: 0.250, 4: 0.375, 8: 0.500"
    )
    assert curve_line(summary.heldout_curve) in describe_run(summary)
