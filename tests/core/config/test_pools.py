"""Work-pool profiles: the gpu/ascend pools fit any recipe to their hardware, keeping tuning."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from uni_agent_core.config import load_recipe
from uni_agent_core.config.pools import (
    PROFILE_ENV,
    load_pool_profile,
    load_recipe_for_pool,
    pool_overrides,
)
from uni_agent_core.config.problems import RecipeError

ROOT = Path(__file__).resolve().parents[3]


def _deployments() -> dict[str, dict]:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {d["name"]: d for d in spec["deployments"]}


def _fit(recipe: str, pool: str, overrides: list[str] | None = None):
    env = {PROFILE_ENV: str(ROOT / "pools" / f"{pool}.yaml")}
    return load_recipe_for_pool(ROOT / "recipes" / recipe, overrides or [], env)


@pytest.mark.parametrize(
    ("pool", "device", "sync"), [("gpu", "cuda", "nccl"), ("ascend", "npu", "hccl")]
)
def test_the_embedded_default_gets_the_pools_trainer_engine_and_sandbox(
    pool: str, device: str, sync: str
) -> None:
    fitted = _fit("tiny-cpu.yaml", pool)
    backend = fitted.trainer.backend
    assert (backend.type, backend.device, backend.checkpoint_engine) == ("verl", device, sync)
    assert (fitted.engine.type, fitted.engine.api) == ("openai_server", "vllm")
    assert fitted.sandbox.type == "docker"
    # Everything the profile does not own is the recipe's own.
    assert fitted.tasks == load_recipe(ROOT / "recipes" / "tiny-cpu.yaml").tasks


def test_a_cluster_recipe_keeps_its_tuning_and_only_changes_device() -> None:
    original = load_recipe(ROOT / "recipes" / "qwen3.5-9b-swerebench-grpo-gpu.yaml")
    profile = load_pool_profile(ROOT / "pools" / "gpu.yaml")
    assert pool_overrides(original, profile) == []  # already fits: nothing changes
    on_ascend = _fit("qwen3.5-9b-swerebench-grpo-gpu.yaml", "ascend")
    assert on_ascend.trainer.backend.device == "npu"
    assert on_ascend.trainer.backend.checkpoint_engine == "hccl"
    assert on_ascend.trainer.backend.actor == original.trainer.backend.actor
    assert on_ascend.engine == original.engine and on_ascend.sandbox == original.sandbox


def test_the_runs_own_overrides_still_win() -> None:
    fitted = _fit("tiny-cpu.yaml", "gpu", ["trainer.backend.n_gpus_per_node=4"])
    assert fitted.trainer.backend.n_gpus_per_node == 4


def test_no_profile_means_the_recipe_as_written() -> None:
    path = ROOT / "recipes" / "tiny-cpu.yaml"
    assert load_recipe_for_pool(path, [], {}) == load_recipe(path)


def test_a_recipe_that_cannot_run_on_the_pool_fails_with_the_reason() -> None:
    # ci-smoke's mini-batch (2 x 2 trajectories) does not split over 8 data-parallel ranks.
    with pytest.raises(RecipeError, match="not divisible by the 8 data-parallel ranks"):
        _fit("ci-smoke.yaml", "gpu")


def test_a_missing_or_invalid_profile_is_a_clear_error(tmp_path: Path) -> None:
    recipe = ROOT / "recipes" / "tiny-cpu.yaml"
    with pytest.raises(RecipeError, match="pool profile not found"):
        load_recipe_for_pool(recipe, [], {PROFILE_ENV: str(tmp_path / "nope.yaml")})
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsections:\n  trainer.optimizer: {keep_types: [a], default: {}}\n")
    with pytest.raises(RecipeError, match="invalid pool profile"):
        load_recipe_for_pool(recipe, [], {PROFILE_ENV: str(bad)})


@pytest.mark.parametrize(("name", "pool"), [("train-gpu", "gpu"), ("train-ascend", "ascend")])
def test_accelerator_deployments_name_their_pool_profile_and_fit_their_recipe(
    name: str, pool: str
) -> None:
    deployment = _deployments()[name]
    assert deployment["work_pool"]["name"] == pool
    env = deployment["work_pool"]["job_variables"]["env"]
    assert env["AGENT_RL_POOL"] == pool
    profile = load_pool_profile(ROOT / env[PROFILE_ENV])
    assert profile.name == pool
    recipe = load_recipe_for_pool(
        ROOT / deployment["parameters"]["recipe"], [], {PROFILE_ENV: str(ROOT / env[PROFILE_ENV])}
    )
    assert recipe.trainer.backend.type == "verl"
