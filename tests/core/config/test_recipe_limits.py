"""Sane upper bounds: steps, memory and timeouts past them are refused, naming the field."""

from __future__ import annotations

import pytest

from uni_agent_core.config import RecipeError, parse_recipe
from uni_agent_core.config.base import MAX_DURATION_S
from uni_agent_core.config.sandbox import MAX_SANDBOX_MEMORY_MB
from uni_agent_core.config.training import MAX_STEPS


def problem_keys(*overrides: str) -> dict[str, str]:
    """{dotted key: message} of a recipe that must be refused."""
    with pytest.raises(RecipeError) as caught:
        parse_recipe({"name": "limits"}, overrides)
    return {problem.key: problem.message for problem in caught.value.problems}


@pytest.mark.parametrize(
    ("override", "key", "fragment"),
    [
        ("trainer.total_steps=1000000000000000000000000000000", "trainer.total_steps", "10000000"),
        ("trainer.lr_warmup_steps=100000000", "trainer.lr_warmup_steps", "10000000"),
        ("sandbox.memory_mb=99999999999999", "sandbox.memory_mb", "1048576"),
        ("sandbox.startup_timeout_s=100000", "sandbox.startup_timeout_s", "24 h"),
        ("sandbox.cpu_time_s=100000", "sandbox.cpu_time_s", "86400"),
        ("reward.test_timeout_s=1e9", "reward.test_timeout_s", "24 h"),
        ("gateway.session_ttl_s=1e9", "gateway.session_ttl_s", "24 h"),
        (
            "engine={type: openai_server, model: m, base_urls: [http://h], timeout_s: 1e9}",
            "engine.timeout_s",
            "24 h",
        ),
        (
            "harness={type: blackbox, command: [claude], timeout_s: 1e9}",
            "harness.timeout_s",
            "24 h",
        ),
    ],
)
def test_values_past_their_bound_are_refused(override: str, key: str, fragment: str) -> None:
    problems = problem_keys(override)
    assert key in problems, problems
    assert fragment in problems[key]


def test_a_whole_day_deadline_passes_and_one_second_more_does_not() -> None:
    day = [
        f"sandbox.wall_clock_s={MAX_DURATION_S}",
        f"sandbox.exec_timeout_s={MAX_DURATION_S}",
        f"harness.wall_clock_s={MAX_DURATION_S}",
    ]
    recipe = parse_recipe({"name": "limits"}, day)
    assert recipe.sandbox.wall_clock_s == MAX_DURATION_S
    problems = problem_keys(*day, f"sandbox.wall_clock_s={MAX_DURATION_S + 1}")
    assert list(problems) == ["sandbox.wall_clock_s"]
    assert problems["sandbox.wall_clock_s"].startswith("86401 s exceeds 24 h")


def test_the_bounds_themselves_are_accepted() -> None:
    recipe = parse_recipe(
        {"name": "limits"},
        [
            f"trainer.total_steps={MAX_STEPS}",
            f"sandbox.memory_mb={MAX_SANDBOX_MEMORY_MB}",
        ],
    )
    assert recipe.trainer.total_steps == MAX_STEPS
    assert recipe.sandbox.memory_mb == MAX_SANDBOX_MEMORY_MB
