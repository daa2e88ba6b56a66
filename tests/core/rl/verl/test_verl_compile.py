"""Recipes compiled to verl's trainer config, composed against the schema in the verl wheel."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

from uni_agent_core.cli import main  # noqa: E402
from uni_agent_core.config import load_recipe  # noqa: E402
from uni_agent_core.config.problems import RecipeError  # noqa: E402
from uni_agent_core.rl.verl.compile import (  # noqa: E402
    VerlConfigError,
    VerlInputs,
    compose_verl_config,
    hydra_value,
    verl_overrides,
)
from uni_agent_core.rl.verl.launch import plan_launch  # noqa: E402

RECIPES = Path(__file__).resolve().parents[4] / "recipes"
ACCELERATOR_RECIPES = sorted(p for p in RECIPES.glob("*.yaml") if p.stem.endswith(("-gpu", "-npu")))
INPUTS = VerlInputs(
    train_files=Path("/data/train.parquet"),
    val_files=Path("/data/val.parquet"),
    agent_loop_config=Path("/data/agent_loops.yaml"),
    model_path="/models/policy",
    checkpoint_dir=Path("/ckpt"),
)


def test_every_accelerator_recipe_is_covered() -> None:
    assert len(ACCELERATOR_RECIPES) >= 3


@pytest.mark.parametrize("path", ACCELERATOR_RECIPES, ids=lambda p: p.stem)
def test_accelerator_recipes_compose_against_the_verl_schema(path: Path, tmp_path) -> None:
    recipe = load_recipe(path)
    overrides = verl_overrides(recipe, INPUTS)
    # Hydra's struct mode refuses any key the schema lacks; verl's own checks run on top.
    launch = plan_launch(recipe, run_dir=tmp_path)
    config = launch.config
    trainer = recipe.trainer
    assert config.trainer.use_v1 is True
    assert (
        config.trainer.v1.trainer_mode
        == {
            "sync": "sync",
            "colocated_async": "colocate_async",
            "separate_async": "separate_async",
        }[trainer.mode]
    )
    assert config.trainer.device == trainer.backend.device
    assert config.algorithm.adv_estimator == trainer.algorithm.adv_estimator
    assert config.actor_rollout_ref.actor.policy_loss.loss_mode == trainer.algorithm.policy_loss
    assert config.actor_rollout_ref.rollout.name == recipe.engine.api
    assert config.actor_rollout_ref.rollout.n == trainer.group_size
    assert config.actor_rollout_ref.rollout.calculate_log_probs is True
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "uni_agent"
    assert config.actor_rollout_ref.rollout.response_length == trainer.max_response_tokens
    # verl counts a trajectory's versions inclusively: on-policy is 1, our bound b is b + 1.
    threshold = config.trainer.v1.sampler.max_off_policy_threshold
    assert threshold == trainer.staleness.max_versions + 1
    assert config.trainer.v1.sampler.max_off_policy_strategy == trainer.staleness.policy
    assert config.algorithm.filter_groups.enable is trainer.backend.filter_groups
    if trainer.mode == "separate_async":
        separate = config.trainer.v1.separate_async
        assert separate.parameter_sync_step == trainer.backend.parameter_sync_step
        assert separate.hybrid_rollout.enable_switch is trainer.backend.role_switching
        assert config.data.train_batch_size == (
            separate.parameter_sync_step * config.actor_rollout_ref.actor.ppo_mini_batch_size
        )
    # Every override names a key that exists in the composed config (no `+key` additions).
    assert not any(o.startswith("+") for o in overrides)


def test_megatron_recipe_maps_parallelism_and_routing_replay(tmp_path) -> None:
    recipe = load_recipe(RECIPES / "qwen3-30b-a3b-r2e-gspo-gpu.yaml")
    config = plan_launch(recipe, run_dir=tmp_path).config
    megatron = config.actor_rollout_ref.actor.megatron
    assert (megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size) == (4, 2)
    assert (megatron.context_parallel_size, megatron.expert_model_parallel_size) == (2, 8)
    assert megatron.router_replay.mode == "R2"
    assert config.actor_rollout_ref.rollout.enable_rollout_routing_replay is False


@pytest.mark.parametrize("path", ACCELERATOR_RECIPES, ids=lambda p: p.stem)
def test_dry_run_prints_the_command_and_config(path: Path, tmp_path, capsys) -> None:
    code = main(["verl", "launch", "--recipe", str(path), "--run-dir", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "-m verl.trainer.main_ppo" in out and "trainer.use_v1=true" in out
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=uni_agent" in out
    assert "# composed config" in out and "trainer_mode:" in out
    assert not (tmp_path / "verl").exists(), "a dry run writes nothing"


def test_launch_without_accelerators_fails_with_the_reason(tmp_path, capsys) -> None:
    recipe = ACCELERATOR_RECIPES[0]
    code = main(["verl", "launch", "--recipe", str(recipe), "--run-dir", str(tmp_path)])
    assert code == 2
    assert "no Ray cluster" in capsys.readouterr().err


def test_embedded_recipes_are_refused(capsys) -> None:
    code = main(["verl", "launch", "--recipe", str(RECIPES / "ci-smoke.yaml"), "--dry-run"])
    assert code == 2
    assert "trainer.backend.type: verl" in capsys.readouterr().err


def test_separate_async_batch_rule_is_checked_before_launch() -> None:
    with pytest.raises(RecipeError, match="parameter_sync_step"):
        load_recipe(RECIPES / "qwen3.5-9b-swerebench-grpo-gpu.yaml", ["trainer.batch_size=16"])


def test_unknown_keys_are_rejected_by_the_schema() -> None:
    with pytest.raises(VerlConfigError, match="trainer.no_such_key"):
        compose_verl_config(["trainer.no_such_key=1"])


def test_router_replay_needs_megatron_and_r3_needs_recorded_routes() -> None:
    with pytest.raises(RecipeError, match="megatron"):
        load_recipe(
            RECIPES / "qwen3.5-9b-swerebench-grpo-gpu.yaml",
            ["trainer.backend.router_replay=R2"],
        )
    with pytest.raises(RecipeError, match="expert routes"):
        load_recipe(
            RECIPES / "qwen3-30b-a3b-r2e-gspo-gpu.yaml", ["trainer.backend.router_replay=R3"]
        )


def test_per_request_sampling_is_refused_on_verl(tmp_path) -> None:
    recipe = load_recipe(RECIPES / "tiny-verl-gpu.yaml", ["gateway.sampling_override=allow"])
    with pytest.raises(VerlConfigError, match="rollout.temperature"):
        plan_launch(recipe, run_dir=tmp_path)


def test_hydra_values() -> None:
    assert hydra_value(None) == "null"
    assert hydra_value(True) == "true"
    assert hydra_value(1e-06) == "1e-06"
    assert hydra_value(["console", "mlflow"]) == "[console,mlflow]"
    assert hydra_value("/models/Qwen3.5-9B") == "/models/Qwen3.5-9B"
    assert hydra_value("sqlite:///x y") == "'sqlite:///x y'"


def test_agent_rl_train_hands_verl_recipes_to_the_launcher(tmp_path, capsys) -> None:
    recipe = str(RECIPES / "tiny-verl-gpu.yaml")
    assert main(["train", "--recipe", recipe, "--run-dir", str(tmp_path)]) == 2
    assert "no Ray cluster" in capsys.readouterr().err
    assert not (tmp_path / "verl").exists(), "nothing is written before the launch can start"


def test_the_train_flows_training_task_launches_verl(tmp_path) -> None:
    pytest.importorskip("prefect")
    from tasks.training import train
    from uni_agent_core.rl.verl.launch import VerlLaunchError
    from uni_agent_core.types import TaskSpec

    recipe = load_recipe(RECIPES / "tiny-verl-gpu.yaml")
    with pytest.raises(VerlLaunchError, match="no Ray cluster"):
        train.fn(recipe, tmp_path, [TaskSpec(instance_id="some-task", problem_statement="p")])
