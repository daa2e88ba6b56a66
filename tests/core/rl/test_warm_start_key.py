"""A finished warm start is reused only when the settings it depends on match its key; a new
one fits the policy on the trainer's device."""

import json
import shutil
from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.rl.warm_start import REPORT, _finished, run_warm_start, warm_start_key
from uni_agent_core.types import TaskSpec

ROOT = Path(__file__).resolve().parents[3]


def _recipe(*overrides: str):
    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    return load_recipe(
        ROOT / "recipes" / "ci-smoke.yaml", [f"sandbox.isolation={isolation}", *overrides]
    )


def _tasks(*ids: str) -> list[TaskSpec]:
    return [TaskSpec(instance_id=i, problem_statement="fix it") for i in ids]


def _finished_stage(directory: Path, key: dict) -> None:
    (directory / "policy").mkdir(parents=True)
    (directory / "policy" / "config.json").write_text("{}")
    report = {"trajectories": 2, "mlflow_run_id": "run-1", "key": key}
    (directory / REPORT).write_text(json.dumps(report))


def test_a_finished_warm_start_with_the_same_key_is_reused(tmp_path) -> None:
    key = warm_start_key(_recipe("warm_start.epochs=2"), _tasks("a", "b"))
    _finished_stage(tmp_path / "warm_start", key)
    done = _finished(tmp_path / "warm_start", key, print)
    assert done is not None and done.reused and done.mlflow_run_id == "run-1"


def test_other_settings_or_tasks_discard_the_finished_warm_start(tmp_path) -> None:
    key = warm_start_key(_recipe("warm_start.epochs=2"), _tasks("a", "b"))
    changes = {
        "warm_start": warm_start_key(_recipe("warm_start.epochs=3"), _tasks("a", "b")),
        "tasks": warm_start_key(_recipe("warm_start.epochs=2"), _tasks("a", "c")),
        "seed": warm_start_key(_recipe("warm_start.epochs=2", "seed=7"), _tasks("a", "b")),
        "harness": warm_start_key(
            _recipe("warm_start.epochs=2", "harness.max_turns=3"), _tasks("a", "b")
        ),
    }
    for field, other in changes.items():
        directory = tmp_path / field
        _finished_stage(directory, key)
        lines: list[str] = []
        assert _finished(directory, other, lines.append) is None
        assert not directory.exists() and f"other {field}" in lines[0]


def test_a_warm_start_without_a_key_is_not_reused(tmp_path) -> None:
    key = warm_start_key(_recipe(), _tasks("a"))
    _finished_stage(tmp_path / "warm_start", {})
    assert _finished(tmp_path / "warm_start", key, print) is None


def test_the_warm_start_fits_on_the_trainers_device(tmp_path, monkeypatch) -> None:
    """Found on a lent GPU: the fit loaded the policy on the CPU whatever the recipe's device."""
    import uni_agent_core.models
    import uni_agent_core.rl.sft

    class Loaded(Exception):
        pass

    loaded: dict = {}

    async def gold(recipe, tasks, echo):
        return ["a gold trajectory"]

    def load_policy(name, **kwargs):
        loaded.update(kwargs)
        raise Loaded

    monkeypatch.setattr(uni_agent_core.rl.sft, "gold_trajectories", gold)
    monkeypatch.setattr(uni_agent_core.models, "load_policy", load_policy)
    recipe = _recipe("warm_start.enabled=true", "trainer.backend.device=cuda")
    with pytest.raises(Loaded):
        run_warm_start(recipe, tmp_path, _tasks("a"), track=False, echo=lambda line: None)
    assert loaded["device"] == "cuda" and loaded["dtype"] == "float32"


def test_a_reused_warm_start_whose_mlflow_run_is_gone_is_logged_again(tmp_path) -> None:
    import mlflow

    from uni_agent_core.rl.warm_start import _tracked

    recipe = _recipe(f"tracking.tracking_uri=sqlite:///{tmp_path / 'fresh.db'}")
    key = warm_start_key(recipe, _tasks("a"))
    directory = tmp_path / "warm_start"
    _finished_stage(directory, key)
    report = json.loads((directory / REPORT).read_text())
    report.update(loss_by_step=[0.9, 0.4], loss_by_epoch=[0.4], gold_s=1.0, fit_s=2.0)
    (directory / REPORT).write_text(json.dumps(report))
    for name in ("nll.png", "trajectories.jsonl"):
        (directory / name).write_text("")
    lines: list[str] = []

    done = _tracked(_finished(directory, key, print), recipe, lines.append)

    assert done.mlflow_run_id not in (None, "run-1")
    assert "run-1 is not in" in lines[0]
    assert json.loads((directory / REPORT).read_text())["mlflow_run_id"] == done.mlflow_run_id
    client = mlflow.MlflowClient(tracking_uri=recipe.tracking.tracking_uri)
    nll = client.get_metric_history(done.mlflow_run_id, "warm_start/nll")
    assert [m.value for m in nll] == [0.9, 0.4]
    again = _tracked(_finished(directory, key, print), recipe, lines.append)
    assert again.mlflow_run_id == done.mlflow_run_id and len(lines) == 1  # found: kept
