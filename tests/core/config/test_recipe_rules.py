"""Cross-field rules: each rejects a bad combination, naming the key to fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from uni_agent_core.config import (
    OpenAIServerEngineConfig,
    ReactHarnessConfig,
    RecipeError,
    VerlBackendConfig,
    parse_recipe,
    read_recipe_data,
)

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
MINIMAL: dict[str, Any] = {"name": "rules"}


def verl_gpu() -> dict[str, Any]:
    """A valid verl separate_async recipe (the published 9B run)."""
    return read_recipe_data(RECIPES / "qwen3.5-9b-swerebench-grpo-gpu.yaml")


def rejected(data: dict[str, Any], *overrides: str) -> dict[str, str]:
    """Problems of an invalid recipe as {dotted key: message}."""
    with pytest.raises(RecipeError) as caught:
        parse_recipe(data, overrides)
    return {problem.key: problem.message for problem in caught.value.problems}


def test_the_bases_of_these_tests_are_valid() -> None:
    parse_recipe(MINIMAL)
    parse_recipe(verl_gpu())


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        # sandbox
        (
            ["sandbox.exec_timeout_s=600", "sandbox.wall_clock_s=300", "harness.wall_clock_s=200"],
            "sandbox.exec_timeout_s",
            "exceeds wall_clock_s (300 s)",
        ),
        # harness
        (["harness.tools=[shell, editor]"], "harness.tools", "include `submit` or `finish`"),
        (["harness.tools=[shell, submit, shell]"], "harness.tools", "each tool may appear once"),
        (
            ["harness.wall_clock_s=4000", "sandbox.wall_clock_s=3600"],
            "harness.wall_clock_s",
            "exceeds sandbox.wall_clock_s (3600 s)",
        ),
        (
            ["harness={type: blackbox, command: [claude], timeout_s: 5000}"],
            "harness.timeout_s",
            "the sandbox would be torn down first",
        ),
        (
            ["harness={type: blackbox, command: [claude], env: {BAD-NAME: x}}"],
            "harness.env",
            "invalid environment variable names: ['BAD-NAME']",
        ),
        (["harness={type: blackbox, command: ['']}"], "harness.command", "must not be empty"),
        # tasks, reward, curriculum
        (["tasks.levels=[L0, L0]"], "tasks.levels", "each level may appear once"),
        (
            ["reward={type: partial_credit, fail_to_pass_weight: 0}"],
            "reward.fail_to_pass_weight",
            "must be > 0",
        ),
        (["curriculum.target_band=[0.8, 0.2]"], "curriculum.target_band", "low < high"),
        (["curriculum.target_band=[0.0, 1.5]"], "curriculum.target_band", "<= 1"),
        (
            ["curriculum.window=4", "curriculum.min_attempts=5"],
            "curriculum.min_attempts",
            "exceeds window (4)",
        ),
        # policy, gateway, engine
        (["policy.name=gpt-5"], "policy.name", "unknown policy 'gpt-5'"),
        (["gateway.sampling.top_k=0"], "gateway.sampling.top_k", "-1 (disabled)"),
        # trainer shape
        (
            ["trainer.mode=sync", "trainer.staleness.max_versions=2"],
            "trainer.staleness.max_versions",
            "sync mode trains on-policy",
        ),
        (
            ["trainer.staleness.max_versions=0"],
            "trainer.staleness.max_versions",
            "colocated_async overlaps rollouts",
        ),
        (["trainer.group_size=1"], "trainer.group_size", "group_size must be >= 2"),
        (
            ["trainer.max_response_tokens=9000", "trainer.max_context_tokens=8192"],
            "trainer.max_response_tokens",
            "exceeds max_context_tokens (8192)",
        ),
        # cross-section budgets
        (
            ["engine.max_model_len=4096", "trainer.max_context_tokens=8192"],
            "engine.max_model_len",
            "below trainer.max_context_tokens (8192)",
        ),
        (
            ["gateway.max_total_tokens=10000"],
            "gateway.max_total_tokens",
            "exceeds trainer.max_context_tokens (8192)",
        ),
        (
            ["harness.context_budget_tokens=10000"],
            "harness.context_budget_tokens",
            "exceeds trainer.max_context_tokens",
        ),
        (
            ["gateway.sampling.max_tokens=5000"],
            "gateway.sampling.max_tokens",
            "exceeds trainer.max_response_tokens (4096)",
        ),
        # environment
        (
            ["tasks={type: swe_bench, path_or_dataset: rows.jsonl}"],
            "sandbox.type",
            "swe_bench tasks ship as container images",
        ),
        (["eval.suite=swe_bench_verified"], "eval.suite", "needs a container sandbox"),
        # engine without servers
        (
            ["engine={type: openai_server, model: m}"],
            "engine.base_urls",
            "required: list the inference servers",
        ),
        (
            ["engine={type: openai_server, model: m, base_urls: [http://a:1, http://b:1]}"]
            + ["router.replicas=3"],
            "router.replicas",
            "does not match the 2 engine.base_urls",
        ),
        (
            ["engine={type: openai_server, model: m, base_urls: [a:1]}"],
            "engine.base_urls",
            "must start with http:// or https://",
        ),
        (
            ["engine={type: openai_server, model: m, base_urls: [http://a:1, http://a:1]}"],
            "engine.base_urls",
            "must be distinct",
        ),
    ],
)
def test_embedded_rules(overrides: list[str], key: str, fragment: str) -> None:
    problems = rejected(MINIMAL, *overrides)
    assert key in problems, problems
    assert fragment in problems[key]


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        # verl's separate_async batch rule (the Uni-Agent pitfall: 16 != 4 * 16)
        (
            ["trainer.batch_size=16"],
            "trainer.batch_size",
            "batch_size == parameter_sync_step * ppo_mini_batch_size, got 16 != 4 * 16; "
            "e.g. set batch_size: 64",
        ),
        (
            ["trainer.backend.rollout.nnodes=0"],
            "trainer.backend.rollout.nnodes",
            "needs a standalone rollout pool",
        ),
        (
            ["trainer.backend.checkpoint_engine=naive"],
            "trainer.backend.checkpoint_engine",
            "separate_async pushes weights across pools",
        ),
        (
            ["trainer.backend.checkpoint_engine=hccl"],
            "trainer.backend.checkpoint_engine",
            "hccl does not run on cuda; use nccl",
        ),
        # colocated / sync with verl
        (
            ["trainer.mode=colocated_async", "trainer.backend.rollout.nnodes=0"],
            "trainer.backend.parameter_sync_step",
            "must be 1 (got 4)",
        ),
        (
            ["trainer.mode=colocated_async", "trainer.backend.parameter_sync_step=1"],
            "trainer.backend.rollout.nnodes",
            "runs rollout servers on the trainer pool",
        ),
        (
            [
                "trainer.mode=sync",
                "trainer.staleness.max_versions=0",
                "trainer.backend.parameter_sync_step=1",
                "trainer.backend.rollout.nnodes=0",
                "trainer.backend.ppo_mini_batch_size=24",
            ],
            "trainer.backend.ppo_mini_batch_size",
            "24 does not divide batch_size (64)",
        ),
        (
            ["trainer.backend.ppo_mini_batch_size=null", "trainer.batch_size=66"],
            "trainer.backend.parameter_sync_step",
            "4 does not divide batch_size (66)",
        ),
        # data parallelism: 8 devices / ulysses 1 = 8 ranks; a mini-batch of 15 * 2 = 30
        (
            [
                "trainer.backend.actor.ulysses_sequence_parallel_size=1",
                "trainer.backend.ppo_mini_batch_size=15",
                "trainer.batch_size=60",
                "trainer.group_size=2",
            ],
            "trainer.backend.ppo_mini_batch_size",
            "= 30 trajectories, not divisible by the 8 data-parallel ranks",
        ),
        # parallelism shapes
        (
            ["trainer.backend.actor.tensor_parallel_size=2"],
            "trainer.backend.actor.tensor_parallel_size",
            "needs strategy megatron",
        ),
        (
            ["trainer.backend.strategy=megatron"],
            "trainer.backend.actor.ulysses_sequence_parallel_size",
            "Ulysses is an FSDP feature",
        ),
        (
            ["trainer.backend.actor.ulysses_sequence_parallel_size=3"],
            "trainer.backend.actor",
            "model parallel size 3",
        ),
        (
            ["trainer.backend.rollout.tensor_parallel_size=3"],
            "trainer.backend.rollout.tensor_parallel_size",
            "3 does not divide the 8 devices",
        ),
        # engine vs verl
        (
            ["engine={type: hf}", "router.replicas=null"],
            "engine.type",
            "use engine type openai_server",
        ),
        (
            ["engine.base_urls=[http://10.0.0.1:8000]"],
            "engine.base_urls",
            "registers their addresses at run time",
        ),
    ],
)
def test_verl_rules(overrides: list[str], key: str, fragment: str) -> None:
    problems = rejected(verl_gpu(), *overrides)
    assert key in problems, problems
    assert fragment in problems[key]


def test_group_size_one_is_fine_without_a_group_baseline() -> None:
    recipe = parse_recipe(
        MINIMAL, ["trainer.group_size=1", "trainer.algorithm.adv_estimator=reinforce_plus_plus"]
    )
    assert recipe.trainer.group_size == 1


def test_staleness_defaults_follow_the_mode() -> None:
    assert parse_recipe(MINIMAL, ["trainer.mode=sync"]).trainer.staleness.max_versions == 0
    assert parse_recipe(MINIMAL).trainer.staleness.max_versions == 1


def test_verl_defaults_are_resolved() -> None:
    recipe = parse_recipe(
        verl_gpu(),
        ["trainer.backend.ppo_mini_batch_size=null", "trainer.backend.checkpoint_engine=null"],
    )
    backend = recipe.trainer.backend
    assert isinstance(backend, VerlBackendConfig)
    assert backend.ppo_mini_batch_size == 16  # 64 tasks / parameter_sync_step 4
    assert backend.checkpoint_engine == "nccl"
    npu = parse_recipe(
        verl_gpu(), ["trainer.backend.device=npu", "trainer.backend.checkpoint_engine=null"]
    ).trainer.backend
    assert isinstance(npu, VerlBackendConfig) and npu.checkpoint_engine == "hccl"


def test_budgets_and_paths_are_filled_from_the_recipe() -> None:
    recipe = parse_recipe(
        MINIMAL,
        [
            "seed=7",
            "trainer.max_context_tokens=6000",
            "engine={type: openai_server, model: m, base_urls: [http://a:1, http://b:2/]}",
        ],
    )
    assert recipe.gateway.max_total_tokens == 6000
    assert isinstance(recipe.harness, ReactHarnessConfig)
    assert recipe.harness.context_budget_tokens == 6000
    assert recipe.trainer.seed == 7
    assert isinstance(recipe.engine, OpenAIServerEngineConfig)
    assert recipe.engine.base_urls == ["http://a:1", "http://b:2"]
    assert recipe.router.replicas == 2


def test_resolved_recipe_round_trips() -> None:
    for data in (MINIMAL, verl_gpu()):
        recipe = parse_recipe(data)
        again = parse_recipe(recipe.model_dump(mode="json"))
        assert again == recipe
