"""The pipeline's stage functions (`uni_agent_core/pipeline/stages.py`) on the real stack."""

from __future__ import annotations

import shutil
from pathlib import Path

from uni_agent_core.config import load_recipe
from uni_agent_core.pipeline.stages import validate_data

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def test_data_validation_reports_progress_with_an_eta_and_returns_the_valid_tasks(
    tmp_path, capsys
) -> None:
    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    recipe = load_recipe(RECIPES / "ci-smoke.yaml", [f"sandbox.isolation={isolation}"])
    lines: list[str] = []

    valid = validate_data(recipe, tmp_path, echo=lines.append)

    assert len(valid) == 4 and lines[0].startswith("validate-data: 4/4 valid")
    progress = capsys.readouterr().err.splitlines()
    assert len(progress) == 4 and progress[-1].startswith("[validate 4/4]")
    assert all("ETA" in line for line in progress)
