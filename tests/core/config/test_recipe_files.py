"""Every recipe shipped in `recipes/` validates and documents how to run it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from uni_agent_core.config import VerlBackendConfig, load_recipe, validate_paths

RECIPES = sorted((Path(__file__).resolve().parents[3] / "recipes").glob("*.yaml"))
EXPECTED = {
    "tiny-cpu",
    "smollm2-cpu",
    "ci-smoke",
    "qwen3-30b-a3b-r2e-gspo-gpu",
    "qwen3.5-9b-swerebench-grpo-gpu",
    "qwen3.5-9b-swerebench-grpo-npu",
}


def test_the_expected_recipes_exist() -> None:
    assert {path.stem for path in RECIPES} >= EXPECTED


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.name)
def test_recipe_validates_and_is_named_after_its_file(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.name == path.stem


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.name)
def test_recipe_opens_with_its_run_commands(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    relative = f"recipes/{path.name}"
    assert lines[0] == f"# Run:      agent-rl train --recipe {relative}"
    assert f"prefect deployment run agent-rl/train --param recipe={relative}" in lines[1]


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.name)
def test_every_section_has_a_comment(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    sections = yaml.safe_load(path.read_text(encoding="utf-8"))
    for section, value in sections.items():
        if not isinstance(value, dict):
            continue
        index = lines.index(f"{section}:")
        assert lines[index - 1].startswith("#"), f"{path.name}: section {section} has no comment"


def test_validate_paths_accepts_all_recipes() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert validate_paths(RECIPES, out=out, err=err) == 0
    assert out.getvalue().splitlines() == [f"OK {path}" for path in RECIPES]
    assert err.getvalue() == ""


def test_gpu_recipes_mirror_the_published_runs() -> None:
    by_name = {path.stem: load_recipe(path) for path in RECIPES}
    for name in EXPECTED - {"tiny-cpu", "smollm2-cpu", "ci-smoke"}:
        recipe = by_name[name]
        backend = recipe.trainer.backend
        assert isinstance(backend, VerlBackendConfig)
        assert recipe.trainer.mode == "separate_async"
        assert recipe.harness.type == "react" and recipe.harness.max_turns == 100
        assert recipe.trainer.max_context_tokens == 128 * 1024
        assert backend.ppo_mini_batch_size is not None
        assert (
            recipe.trainer.batch_size == backend.parameter_sync_step * backend.ppo_mini_batch_size
        )
    assert by_name["qwen3-30b-a3b-r2e-gspo-gpu"].trainer.algorithm.policy_loss == "gspo"
    assert by_name["qwen3-30b-a3b-r2e-gspo-gpu"].tasks.type == "r2e_gym"
    assert by_name["qwen3.5-9b-swerebench-grpo-gpu"].tasks.type == "swe_rebench"
    npu = by_name["qwen3.5-9b-swerebench-grpo-npu"].trainer.backend
    assert isinstance(npu, VerlBackendConfig)
    assert (npu.device, npu.checkpoint_engine) == ("npu", "hccl")


def test_embedded_recipes_run_without_accelerators() -> None:
    for name in ("tiny-cpu", "smollm2-cpu", "ci-smoke"):
        recipe = load_recipe(next(path for path in RECIPES if path.stem == name))
        assert recipe.engine.type == "hf" and recipe.engine.device == "cpu"
        assert recipe.trainer.backend.type == "embedded"
        assert recipe.sandbox.type == "local"
        assert recipe.tracking.tracking_uri == "sqlite:///mlruns.db"
    ci = load_recipe(next(path for path in RECIPES if path.stem == "ci-smoke"))
    assert ci.trainer.mode == "sync" and ci.trainer.group_size == 2
    assert ci.trainer.total_steps <= 2 and ci.tasks.n <= 4
