"""The mix harness, the agent-CLI presets' configuration, and per-harness metrics."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from uni_agent_core.config.harness import (
    ClaudeCodeHarnessConfig,
    CodexHarnessConfig,
    HarnessConfig,
    MixHarnessConfig,
    harness_deadline_key,
)
from uni_agent_core.config.sandbox import LocalSandboxConfig
from uni_agent_core.eval.metrics import SampleRow, summarize
from uni_agent_core.eval.report import eval_metrics
from uni_agent_core.harness.agent_clis import (
    CLAUDE_CODE,
    CODEX,
    AgentCliError,
    agent_cli_problems,
    locate,
    sandbox_for_agent_clis,
)
from uni_agent_core.harness.base import Endpoint
from uni_agent_core.harness.claude_code import ClaudeCodeHarness
from uni_agent_core.harness.codex import CodexHarness, codex_config
from uni_agent_core.harness.factory import HarnessAssignment, build_harness
from uni_agent_core.rl.metrics import episode_metrics
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec

HARNESS = TypeAdapter(HarnessConfig)
FOUR = {
    "type": "mix",
    "harnesses": [
        {"harness": {"type": "react"}},
        {"harness": {"type": "mini_swe_agent"}},
        {"harness": {"type": "claude_code"}, "weight": 2},
        {"name": "codex-a", "harness": {"type": "codex", "max_turns": 5}},
    ],
}


def _tasks(n: int) -> list[TaskSpec]:
    return [TaskSpec(instance_id=f"task-{i}", problem_statement="x") for i in range(n)]


def test_a_mix_deals_tasks_by_weight_and_keeps_each_task_on_its_member() -> None:
    mix = HARNESS.validate_python(FOUR)
    assignment = HarnessAssignment(mix)
    chosen = [assignment.choose(task)[0] for task in _tasks(10)]
    # Weighted round robin: claude_code (weight 2) twice per five tasks, the first four already
    # mixing all four members.
    assert set(chosen[:4]) == {"react", "mini_swe_agent", "claude_code", "codex-a"}
    assert Counter(chosen) == {"claude_code": 4, "react": 2, "mini_swe_agent": 2, "codex-a": 2}
    # A task met again keeps its member, in any order.
    assert [assignment.choose(task)[0] for task in reversed(_tasks(10))] == chosen[::-1]
    assert [HarnessAssignment(mix).choose(task)[0] for task in _tasks(10)][:1] == chosen[:1]
    assert (
        type(build_harness(assignment.choose(_tasks(10)[3])[1])).__name__
        == {
            "react": "ReactHarness",
            "mini_swe_agent": "MiniSweAgentHarness",
            "claude_code": "ClaudeCodeHarness",
            "codex-a": "CodexHarness",
        }[chosen[3]]
    )


def test_a_task_override_wins_over_the_mix() -> None:
    mix = HARNESS.validate_python(FOUR)
    task = TaskSpec(instance_id="t", problem_statement="x", harness={"type": "codex"})
    assert HarnessAssignment(mix).choose(task)[0] == "codex"


def test_mix_members_need_distinct_names_and_deadlines_take_the_longest() -> None:
    with pytest.raises(ValidationError, match="member names must differ"):
        HARNESS.validate_python({"type": "mix", "harnesses": [{"harness": {"type": "react"}}] * 2})
    mix = HARNESS.validate_python(FOUR)
    assert isinstance(mix, MixHarnessConfig)
    assert harness_deadline_key(mix) == ("react.wall_clock_s", 3000.0)


def test_presets_pin_the_cli_versions_and_check_their_prompt() -> None:
    assert ClaudeCodeHarnessConfig().version == CLAUDE_CODE.version == "2.1.328"
    assert CodexHarnessConfig().version == CODEX.version == "0.169.0"
    with pytest.raises(ValidationError, match="problem_statement"):
        ClaudeCodeHarnessConfig(prompt="fix it")
    assert isinstance(build_harness(ClaudeCodeHarnessConfig()), ClaudeCodeHarness)
    assert isinstance(build_harness(CodexHarnessConfig(where="host")), CodexHarness)


def test_a_missing_or_other_cli_is_named_with_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(
        AgentCliError, match=r"Claude Code 2\.1\.328 is not installed under .*make setup"
    ):
        locate(CLAUDE_CODE, CLAUDE_CODE.version, tmp_path)
    manifest = CODEX.package_dir(tmp_path) / "package.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"version": "0.1.0"}')
    CODEX.executable(tmp_path).parent.mkdir(parents=True)
    CODEX.executable(tmp_path).write_text("")
    with pytest.raises(AgentCliError, match=r"Codex 0\.1\.0 is installed .* asks for 0\.169\.0"):
        locate(CODEX, CODEX.version, tmp_path)
    mix = HARNESS.validate_python(
        {
            "type": "mix",
            "harnesses": [
                {"harness": {"type": "react"}},
                {"harness": {"type": "codex", "cli_prefix": str(tmp_path)}},
            ],
        }
    )
    ((key, why),) = agent_cli_problems(mix)
    assert key == "harness.codex.version" and "0.1.0" in why


def test_in_sandbox_clis_get_their_packages_bound_into_bubblewrap(tmp_path: Path) -> None:
    sandbox = LocalSandboxConfig(isolation="bubblewrap", network=True, read_only_paths=["/opt/x"])
    mix = HARNESS.validate_python(
        {
            "type": "mix",
            "harnesses": [
                {"harness": {"type": "claude_code", "cli_prefix": str(tmp_path)}},
                {"harness": {"type": "codex", "cli_prefix": str(tmp_path)}},
                {"harness": {"type": "react"}},
            ],
        }
    )
    bound = sandbox_for_agent_clis(sandbox, mix)
    assert bound.read_only_paths == ["/opt/x", str(tmp_path.resolve() / "node_modules")]
    assert sandbox.read_only_paths == ["/opt/x"]  # the recipe's section is not changed
    host_only = ClaudeCodeHarnessConfig(where="host")
    assert sandbox_for_agent_clis(sandbox, host_only) is sandbox
    unisolated = LocalSandboxConfig(isolation="none")
    assert sandbox_for_agent_clis(unisolated, mix) is unisolated


def test_codex_config_points_at_the_session_and_turns_the_rest_off() -> None:
    endpoint = Endpoint("http://127.0.0.1:9/sessions/s/v1", "http://127.0.0.1:9/sessions/s", "k")
    text = codex_config(endpoint)
    assert 'base_url = "http://127.0.0.1:9/sessions/s/v1"' in text
    assert 'wire_api = "responses"' in text and 'env_key = "AGENT_RL_API_KEY"' in text
    for line in ('web_search = "disabled"', "check_for_update_on_startup = false"):
        assert line in text
    assert "k" not in text.split("env_key")[1].splitlines()[0].replace("env_key", "")


def _result(harness: str, reward: float, exit_reason: ExitReason, turns: int) -> RolloutResult:
    return RolloutResult(
        task_id=f"{harness}-task",
        sample_index=0,
        reward=reward,
        resolved=reward > 0,
        exit_reason=exit_reason,
        harness=harness,
        turns=turns,
    )


def test_step_metrics_are_split_per_harness() -> None:
    results = [
        _result("react", 1.0, ExitReason.SUBMITTED, 4),
        _result("react", 0.0, ExitReason.MAX_TURNS, 6),
        _result("claude_code", 1.0, ExitReason.FINISHED, 3),
    ]
    metrics = episode_metrics(results, trainer_version=0)
    assert metrics["train/harness/react/reward_mean"] == 0.5
    assert metrics["train/harness/react/turns_mean"] == 5.0
    assert metrics["train/harness/react/exit/max_turns"] == 0.5
    assert metrics["train/harness/claude_code/pass_rate"] == 1.0
    assert metrics["train/harness/claude_code/episodes"] == 1.0
    assert metrics["train/reward_mean"] == pytest.approx(2 / 3)


def test_evaluation_scores_each_harness() -> None:
    rows = [
        SampleRow(
            task_id="a",
            sample_index=0,
            reward=1.0,
            resolved=True,
            exit_reason="finished",
            harness="codex",
        ),
        SampleRow(
            task_id="b",
            sample_index=0,
            reward=0.0,
            resolved=False,
            exit_reason="submitted",
            harness="react",
        ),
    ]
    summary = summarize(rows, k=1)
    assert summary.by_harness["codex"]["pass@1"] == 1.0
    assert summary.by_harness["react"]["pass@1"] == 0.0
    metrics = eval_metrics(summary)
    assert metrics["eval/harness/codex/pass@1"] == 1.0
