"""The pipeline resolves `policy.dtype: auto` once, prints and records the choice
(`uni_agent_core/pipeline/precision.py`)."""

from __future__ import annotations

import json
from pathlib import Path

from uni_agent_core.config import load_recipe
from uni_agent_core.models.precision_choice import ProbeRates, decide
from uni_agent_core.pipeline.precision import with_chosen_precision
from uni_agent_core.rundir.layout import PRECISION

# probe results recorded on an AVX2-only EPYC and an AMX Xeon (tests/core/models/
# test_precision_choice.py has them all)
AVX2_EPYC = {"float32": ProbeRates(30.0, 50.1, 62.2), "bfloat16": ProbeRates(11.6, 2.3, 9.6)}
AMX_XEON = {
    "float32": ProbeRates(355.0, 355.0, 355.0),
    "bfloat16": ProbeRates(3200.0, 3200.0, 3200.0),
}

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def test_auto_becomes_the_measured_dtype_printed_and_written_to_the_run(
    monkeypatch, tmp_path
) -> None:
    monkeypatch.setattr(
        "uni_agent_core.pipeline.precision.choose_dtype",
        lambda *a, **k: decide(AVX2_EPYC, None, cpu="recorded"),
    )
    recipe = load_recipe(RECIPES / "ci-smoke.yaml", ["policy.dtype=auto"])
    lines: list[str] = []
    chosen = with_chosen_precision(recipe, tmp_path, lines.append)
    assert chosen.policy.dtype == "float32" and recipe.policy.dtype == "auto"
    assert lines == [decide(AVX2_EPYC, None, cpu="recorded").summary()]
    assert json.loads((tmp_path / PRECISION).read_text())["dtype"] == "float32"


def test_explicit_bf16_where_it_is_slower_runs_with_a_warning(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(
        "uni_agent_core.pipeline.precision.choose_dtype",
        lambda *a, **k: decide(AVX2_EPYC, None, cpu="recorded"),
    )
    recipe = load_recipe(RECIPES / "ci-smoke.yaml", ["policy.dtype=bfloat16"])
    lines: list[str] = []
    assert with_chosen_precision(recipe, tmp_path, lines.append).policy.dtype == "bfloat16"
    assert len(lines) == 1 and lines[0].startswith("warning: policy.dtype is bfloat16, which")
    assert "runs at 0.08x float32's rate" in lines[0]
    assert not (tmp_path / PRECISION).exists()


def test_explicit_bf16_where_it_is_faster_says_nothing(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(
        "uni_agent_core.pipeline.precision.choose_dtype",
        lambda *a, **k: decide(AMX_XEON, 0.9999, cpu="recorded"),
    )
    recipe = load_recipe(RECIPES / "ci-smoke.yaml", ["policy.dtype=bfloat16"])
    lines: list[str] = []
    assert with_chosen_precision(recipe, tmp_path, lines.append).policy.dtype == "bfloat16"
    assert lines == []
