"""The log-run task: the held-out curve of a run's scored checkpoints, and final metrics that
belong to the final checkpoint alone."""

from pathlib import Path

import mlflow

from uni_agent_core.config import load_recipe
from uni_agent_core.pipeline.results import Evaluated
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker

ROOT = Path(__file__).resolve().parents[2]


def _evaluation(step: int, metrics: dict, directory: Path) -> Evaluated:
    directory.mkdir(parents=True)
    return Evaluated(directory, step, metrics)


def test_earlier_checkpoints_add_their_pass_at_1_to_the_curve_and_nothing_else(
    tmp_path,
) -> None:
    from tasks.tracking import log_run

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml", [f"tracking.tracking_uri={uri}"])
    opened = MlflowTracker(recipe.tracking, run_name=recipe.name)
    opened.finish()
    middle = _evaluation(4, {"eval/pass@1": 0.5, "eval/exit/max_turns": 0.25}, tmp_path / "step-4")
    final = _evaluation(8, {"eval/pass@1": 0.75, "eval/exit/submitted": 1.0}, tmp_path / "step-8")
    log_run.fn(recipe, tmp_path, opened.run_id, final, None, curve=[middle, final])
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(opened.run_id)
    history = client.get_metric_history(opened.run_id, "eval/pass_at_1")
    assert sorted((m.step, m.value) for m in history) == [(4, 0.5), (8, 0.75)]
    # the middle checkpoint's exit reason is not read as the run's final one
    assert "eval/exit/max_turns" not in run.data.metrics
    assert run.data.metrics["eval/exit/submitted"] == 1.0
    assert (tmp_path / "eval" / "heldout_curve.png").is_file()
    eval_artifacts = {a.path for a in client.list_artifacts(opened.run_id, "eval")}
    assert "eval/heldout_curve.png" in eval_artifacts
