"""`run_pipeline`: the stages in the flow's order, each stage's typed result handed on to the
next, over stages that record their calls instead of computing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.pipeline.results import Evaluated, PipelineResult, Trained
from uni_agent_core.pipeline.run import planned_stages, run_pipeline
from uni_agent_core.pipeline.summary import summary_record
from uni_agent_core.rl.warm_start import WarmStartResult
from uni_agent_core.rundir.layout import checkpoint_dir
from uni_agent_core.types import TaskSpec

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
VALID = ["t0", "t1", "t2", "t3"]


def _ids(tasks: Sequence[TaskSpec]) -> list[str]:
    return [task.instance_id for task in tasks]


class RecordingStages:
    """Each stage records what it was given (the recipe's policy, the task ids, the MLflow run,
    the checkpoint) and returns a made-up typed result; `train` writes the complete checkpoints
    the trainer would, so the pipeline finds them to evaluate."""

    def __init__(self, warm_policy: str) -> None:
        self.warm_policy = warm_policy
        self.calls: list[tuple] = []

    def validate_data(self, recipe: Recipe, run_dir: Path) -> list[TaskSpec]:
        self.calls.append(("validate_data", recipe.policy.name))
        return [TaskSpec(instance_id=name, problem_statement="p") for name in VALID]

    def warm_start(self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]) -> WarmStartResult:
        self.calls.append(("warm_start", recipe.policy.name, _ids(tasks)))
        self.warmed = WarmStartResult(
            self.warm_policy, run_dir / "warm_start", {"trajectories": 2}, "warm-run", False
        )
        return self.warmed

    def estimate_difficulty(
        self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]
    ) -> Path | None:
        self.calls.append(("estimate_difficulty", recipe.policy.name, _ids(tasks)))
        return None

    def evaluate(
        self, recipe: Recipe, run_dir: Path, checkpoint: str, trace_run: str | None
    ) -> Evaluated:
        self.calls.append(("evaluate", recipe.policy.name, Path(checkpoint).name, trace_run))
        step = 0 if checkpoint == "none" else int(Path(checkpoint).name.removeprefix("step-"))
        return Evaluated(run_dir / "eval" / f"s{step}", step, {"eval/pass@1": 0.25 * (1 + step)})

    def train(
        self,
        recipe: Recipe,
        run_dir: Path,
        tasks: list[TaskSpec],
        mlflow_run_id: str | None,
        stop_after_steps: int | None,
        launch_command: str | None,
    ) -> Trained:
        self.calls.append(
            ("train", recipe.policy.name, _ids(tasks), mlflow_run_id, stop_after_steps)
        )
        steps = stop_after_steps or recipe.trainer.total_steps
        for step in range(1, steps + 1):
            directory = checkpoint_dir(recipe, run_dir) / f"step-{step:06d}"
            directory.mkdir(parents=True)
            (directory / "manifest.json").write_text(json.dumps({"step": step, "files": {}}))
            (directory / "state.json").write_text("{}")
        return Trained("embedded", "train-run", steps, 0, {"train/reward_mean": 0.5})

    def log_run(
        self,
        recipe: Recipe,
        run_dir: Path,
        mlflow_run_id: str | None,
        evaluation: Evaluated,
        before: Evaluated | None,
        curve: Sequence[Evaluated],
    ) -> str | None:
        before_step = before.step if before is not None else None
        steps = [e.step for e in curve]
        self.calls.append(("log_run", mlflow_run_id, evaluation.step, before_step, steps))
        return mlflow_run_id


def _recipe(*overrides: str) -> Recipe:
    return load_recipe(RECIPES / "ci-smoke.yaml", ["trainer.keep_checkpoints=2", *overrides])


WARM_AND_BEFORE = (
    "warm_start.enabled=true",
    "warm_start.tasks=2",
    "warm_start.rl_tasks=rest",
    "eval.before_training=true",
)


def test_every_stage_runs_in_order_on_what_the_stage_before_returned(tmp_path: Path) -> None:
    recipe = _recipe(*WARM_AND_BEFORE)
    warm = f"hf:{tmp_path / 'warm_start' / 'policy'}"
    stages = RecordingStages(warm)
    lines: list[str] = []

    result = run_pipeline(recipe, tmp_path, stages, echo=lines.append)

    # the warm-started policy and the tasks it did not fit reach every later stage; the warm
    # start's MLflow run is the one the starting policy is traced into and training continues
    assert stages.calls == [
        ("validate_data", "tiny"),
        ("warm_start", "tiny", VALID),
        ("estimate_difficulty", warm, ["t2", "t3"]),
        ("evaluate", warm, "none", "warm-run"),
        ("train", warm, ["t2", "t3"], "warm-run", None),
        ("evaluate", warm, "step-000001", "train-run"),
        ("evaluate", warm, "step-000002", "train-run"),
        ("log_run", "train-run", 2, 0, [1, 2]),
    ]
    assert recipe.policy.name == "tiny", "the given recipe is left as it was"
    assert result.recipe.policy.name == warm and result.warm_start is stages.warmed
    assert result.trained == Trained("embedded", "train-run", 2, 0, {"train/reward_mean": 0.5})
    assert [e.step for e in result.evaluations] == [1, 2] and result.before is not None
    assert result.heldout_curve == [(0, 0.25), (1, 0.5), (2, 0.75)]
    assert result.mlflow_run_id == "train-run"
    started = [line.split(": ", 1)[1] for line in lines if not line.endswith(" s")]
    assert started == planned_stages(recipe) and len(started) == 7
    assert lines[0] == "stage 1/7: validate data"
    assert lines[1].startswith("stage 1/7: validate data done in ")


def test_stopping_early_ends_the_pipeline_after_training(tmp_path: Path) -> None:
    stages = RecordingStages(f"hf:{tmp_path}")
    lines: list[str] = []

    result = run_pipeline(_recipe(), tmp_path, stages, stop_after_steps=1, echo=lines.append)

    assert [call[0] for call in stages.calls] == ["validate_data", "estimate_difficulty", "train"]
    assert stages.calls[-1] == ("train", "tiny", VALID, None, 1)
    assert result.evaluations == () and result.final_evaluation is None
    assert lines[-1] == (
        "stopped at step 1 of 2: the checkpoints are evaluated and logged by the run that "
        "finishes training"
    )


def test_the_record_has_the_keys_the_flow_returns(tmp_path: Path) -> None:
    trained = Trained("embedded", "run", 2, 0, {"train/reward_mean": 0.5})
    final = Evaluated(tmp_path / "eval", 2, {"eval/pass@1": 0.5})
    result = PipelineResult(_recipe(), tmp_path, trained, evaluations=(final,))

    record = summary_record(result)

    assert list(record) == [
        "run_dir",
        "backend",
        "mlflow_run_id",
        "steps",
        "start_step",
        "final",
        "eval",
        "eval_before",
        "warm_start",
        "heldout_curve",
    ]
    assert record["eval"] == {"eval/pass@1": 0.5} and record["heldout_curve"] == [(2, 0.5)]
    assert record["eval_before"] is None and record["warm_start"] is None


def test_a_verl_recipe_is_refused_before_any_stage(tmp_path: Path) -> None:
    stages = RecordingStages(f"hf:{tmp_path}")
    recipe = load_recipe(RECIPES / "tiny-verl-gpu.yaml")
    with pytest.raises(ValueError, match="trainer.backend.type is verl"):
        run_pipeline(recipe, tmp_path, stages)
    assert stages.calls == []


def test_auto_precision_is_chosen_before_the_first_stage(tmp_path: Path, monkeypatch) -> None:
    from uni_agent_core.models.precision_choice import ProbeRates, decide

    measured = {"float32": ProbeRates(30.0, 50.0, 60.0), "bfloat16": ProbeRates(11.0, 2.0, 9.0)}
    monkeypatch.setattr(
        "uni_agent_core.pipeline.precision.choose_dtype", lambda *a, **k: decide(measured, None)
    )
    lines: list[str] = []

    result = run_pipeline(
        _recipe("policy.dtype=auto"), tmp_path, RecordingStages(f"hf:{tmp_path}"), echo=lines.append
    )

    assert lines[0].startswith("policy.dtype auto -> float32: fastest on this CPU")
    assert lines[1] == "stage 1/5: validate data"
    assert result.recipe.policy.dtype == "float32"
    assert (tmp_path / "precision.json").is_file()
