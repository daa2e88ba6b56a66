"""A finished warm start is reused only when the settings it depends on match its key."""

import json
import shutil
from pathlib import Path

from uni_agent_core.config import load_recipe
from uni_agent_core.rl.warm_start import REPORT, _finished, warm_start_key
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
