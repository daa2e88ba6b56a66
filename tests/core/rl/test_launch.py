"""rl.launch: one entry into training whose summary has one shape for both backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.rl import launch as launch_module
from uni_agent_core.rl.launch import TrainingFailed, launch, verl_checkpointed_step
from uni_agent_core.types import TaskSpec

ROOT = Path(__file__).resolve().parents[3]
VERL_RECIPE = ROOT / "recipes" / "tiny-verl-gpu.yaml"


def _checkpointed(run_dir: Path, step: int) -> None:
    tracker = run_dir / "verl" / "checkpoints" / launch_module.VERL_CHECKPOINT_TRACKER
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(f"{step}\n")


def test_verl_checkpointed_step_reads_verls_tracker(tmp_path) -> None:
    assert verl_checkpointed_step(tmp_path) == 0
    _checkpointed(tmp_path, 7)
    assert verl_checkpointed_step(tmp_path) == 7


def test_a_verl_run_resumed_at_its_checkpoint_reports_the_steps_it_trained(
    tmp_path, monkeypatch
) -> None:
    recipe = load_recipe(VERL_RECIPE, ["trainer.total_steps=10"])
    _checkpointed(tmp_path, 4)
    calls = []

    def fake_launch_recipe(recipe, *, run_dir, task_ids, echo):
        calls.append((run_dir, task_ids))
        _checkpointed(run_dir, 10)
        return 0

    import uni_agent_core.rl.verl.launch as verl_launch

    monkeypatch.setattr(verl_launch, "launch_recipe", fake_launch_recipe)
    summary = launch(recipe, tmp_path, tasks=[TaskSpec(instance_id="a", problem_statement="p")])
    assert calls == [(tmp_path, ["a"])]
    assert (summary.backend, summary.start_step, summary.steps) == ("verl", 4, 6)
    assert summary.final == {} and summary.mlflow_run_id is None


def test_a_failed_verl_trainer_is_an_error(tmp_path, monkeypatch) -> None:
    import uni_agent_core.rl.verl.launch as verl_launch

    monkeypatch.setattr(verl_launch, "launch_recipe", lambda recipe, **kw: 3)
    with pytest.raises(TrainingFailed, match="code 3"):
        launch(load_recipe(VERL_RECIPE), tmp_path)


def test_stop_after_steps_is_refused_for_verl(tmp_path) -> None:
    with pytest.raises(ValueError, match="embedded trainer"):
        launch(load_recipe(VERL_RECIPE), tmp_path, stop_after_steps=1)
