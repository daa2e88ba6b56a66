"""The real Claude Code and Codex CLIs (installed by `make setup`) play micro-swe episodes.

Each episode runs the pinned CLI through its harness preset, in a local sandbox (bubblewrap
where it exists), against a live gateway whose engine is a scripted policy: it reads the
decoded prompt and answers with tool calls in the model's own syntax, so the CLI edits the
repository over several turns, exactly as it would with a model. The verifier then scores the
diff in a fresh sandbox, and the session's chains are checked against its engine calls (TITO).
Beyond the plain episode: a Claude Code subagent and a Codex compaction summary are side calls
that land in chains of their own, and a compaction (both CLIs) opens a new chain.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY
from support.tasks import TEST_KEY, sandbox_config

from uni_agent_core.config.harness import (
    AgentCliHarnessConfig,
    ClaudeCodeHarnessConfig,
    CodexHarnessConfig,
)
from uni_agent_core.config.reward import ResolvedRewardConfig
from uni_agent_core.envs.micro_swe.generator import generate, write_dataset
from uni_agent_core.envs.sources import load_task_file
from uni_agent_core.envs.verifier import Verifier, task_sandbox_factory
from uni_agent_core.envs.workspace import prepare_agent_workspace
from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.harness.agent_clis import sandbox_for_agent_clis
from uni_agent_core.harness.base import Endpoint, HarnessResult
from uni_agent_core.harness.factory import build_harness
from uni_agent_core.inference.scripted import ScriptedEngine
from uni_agent_core.types import EngineCall, ExitReason, TaskSpec, Trajectory

SUBAGENT_TASK = "List the files of the repository."
SUMMARY = "Applied the fix to the repository; nothing is left to do."
DONE = "The fix is in place."

# Claude Code compacts at its first chance under a 9K-token window (its prompt is ~7.5K tokens
# of the tiny tokenizer, so the threshold is passed right after the first turn).
CLAUDE_COMPACTS_EARLY = {
    "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "9000",
    "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "9000",
    "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50",
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "500",
}
# Codex compacts once its context passes 15K tokens: after the 3000-line output (its prompt is
# ~13K tokens).
CODEX_COMPACTS_AFTER_BIG_OUTPUT = ["-c", "model_auto_compact_token_limit=15000"]


def tool_call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@dataclass
class ScriptedAgentPolicy:
    """A policy that solves the task through the CLI's own shell tool, reading its prompt.

    Main conversation: one action per tool result seen so far (delegate to a subagent, apply
    the gold patch, print a long output), then a final answer. A subagent's task gets a text
    answer, a compaction request a summary, and the conversation that resumes from the summary
    the final answer.
    """

    task: TaskSpec
    shell: str
    """The CLI's shell tool and its command argument."""
    argument: str
    subagent: bool = False
    long_output: bool = False
    prompts: list[str] = field(default_factory=list)

    def __call__(self, index: int, prompt: str) -> str:
        self.prompts.append(prompt)
        last_user = prompt.rsplit("<|im_start|>user\n", 1)[-1]
        tool_results = prompt.count("<tool_response>")
        if SUBAGENT_TASK in last_user:
            return "The repository holds README.md, tests and the package."
        if tool_results and "summar" in last_user.lower() and "<tool_response>" not in last_user:
            return f"<analysis>Done.</analysis>\n<summary>{SUMMARY}</summary>"
        if SUMMARY in prompt:
            return DONE
        actions = [
            *(["subagent"] if self.subagent else []),
            "apply",
            *(["long"] if self.long_output else []),
        ]
        if tool_results >= len(actions):
            return DONE
        action = actions[tool_results]
        if action == "subagent":
            arguments = {
                "description": "list files",
                "prompt": SUBAGENT_TASK,
                "subagent_type": "general-purpose",
                "run_in_background": False,
            }
            return "Delegating." + tool_call("Agent", arguments)
        if action == "apply":
            command = f"git apply <<'PATCH'\n{self.task.patch}PATCH\n"
            return "Applying the fix." + tool_call(self.shell, {self.argument: command})
        return "Checking." + tool_call(self.shell, {self.argument: "seq 1 3000"})


@dataclass
class Episode:
    result: HarnessResult
    reward: float
    trajectories: list[Trajectory]
    calls: list[EngineCall]
    prompts: list[str]
    ignored: set[str]


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskSpec:
    root = tmp_path_factory.mktemp("micro-swe")
    write_dataset(generate(1, 0, levels=["L0"], key=TEST_KEY), root, key=TEST_KEY)
    return load_task_file(root)[0]


@pytest.fixture(scope="module")
def gateway(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer)
    with running_gateway(
        SessionManager(engine, tiny_tokenizer, control_key=CONTROL_KEY), model_name="tiny"
    ) as url:
        yield url, engine


@dataclass
class FixedReply:
    """A policy that always says the same thing."""

    reply: str
    prompts: list[str] = field(default_factory=list)

    def __call__(self, index: int, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.reply


def play(
    gateway, task: TaskSpec, config: AgentCliHarnessConfig, policy, sampling: dict | None = None
) -> Episode:
    url, engine = gateway
    engine.respond = policy
    created = httpx.post(
        url + "/sessions", json={"sampling": sampling or {}}, headers=CONTROL, timeout=10
    ).json()
    endpoint = Endpoint.from_session(created, model="tiny", control_key=CONTROL_KEY)
    sandbox = sandbox_config().model_copy(update={"network": "gateway"})
    factory = task_sandbox_factory(sandbox_for_agent_clis(sandbox, config))

    async def episode() -> tuple[HarnessResult, float]:
        async with factory(task) as box:
            await prepare_agent_workspace(box, task)
            result = await build_harness(config).run(task, box, endpoint)
            diff = await box.diff()
        verdict = await Verifier(factory, ResolvedRewardConfig()).verify(task, diff)
        return result, verdict.reward

    result, reward = asyncio.run(episode())
    root = endpoint.openai_base_url.removesuffix("/v1")
    headers = CONTROL
    trajectories = [
        Trajectory(**t) for t in httpx.get(root + "/trajectories", headers=headers).json()
    ]
    calls = [EngineCall(**c) for c in httpx.get(root + "/calls", headers=headers).json()]
    metrics = httpx.get(url + "/metrics", headers=CONTROL, timeout=10).text
    ignored = {
        line.split('field="')[1].split('"')[0]
        for line in metrics.splitlines()
        if line.startswith("agent_rl_gateway_ignored_request_fields_total{")
    }
    return Episode(result, reward, trajectories, calls, policy.prompts, ignored)


def decoded(gateway, ids: list[int]) -> str:
    return gateway[1].tokenizer.decode(ids)


def claude(**kwargs) -> ClaudeCodeHarnessConfig:
    return ClaudeCodeHarnessConfig(**{"timeout_s": 300, "max_turns": 10, **kwargs})


def codex(**kwargs) -> CodexHarnessConfig:
    return CodexHarnessConfig(**{"timeout_s": 300, "max_turns": 10, **kwargs})


def assert_solved(episode: Episode) -> None:
    assert episode.result.exit_reason == ExitReason.FINISHED, episode.result.info
    assert episode.reward == 1.0
    assert tito_violations(episode.trajectories, episode.calls) == []


@pytest.mark.parametrize("where", ["sandbox", "host"])
def test_claude_code_fixes_the_task_over_several_turns_on_one_chain(gateway, task, where) -> None:
    policy = ScriptedAgentPolicy(task, "Bash", "command")
    episode = play(gateway, task, claude(where=where), policy)
    assert_solved(episode)
    assert len(episode.calls) == 2 and len(episode.trajectories) == 1
    assert episode.result.steps == 2 and episode.result.info["where"] == where
    # It spoke Anthropic Messages as it does to Anthropic, with its own fields accepted.
    assert {"context_management", "output_config", "system.cache_control"} <= episode.ignored
    (chain,) = episode.trajectories
    assert chain.num_turns == 2 and sum(chain.loss_mask) == sum(
        len(c.output_ids) for c in episode.calls
    )
    assert task.problem_statement[:60] in decoded(gateway, chain.prompt_ids)


def test_codex_fixes_the_task_over_several_turns_on_one_chain(gateway, task) -> None:
    policy = ScriptedAgentPolicy(task, "exec_command", "cmd")
    episode = play(gateway, task, codex(), policy)
    assert_solved(episode)
    assert len(episode.calls) == 2 and len(episode.trajectories) == 1
    assert {"client_metadata", "include", "reasoning", "store"} <= episode.ignored
    # The patch went through Codex's own shell tool, and its output came back as a tool result.
    assert "git apply" in decoded(gateway, episode.calls[1].prompt_ids)


def test_a_claude_code_subagent_is_a_side_conversation_with_a_chain_of_its_own(
    gateway, task
) -> None:
    policy = ScriptedAgentPolicy(task, "Bash", "command", subagent=True)
    tools = ["Bash", "Read", "Edit", "Write", "Glob", "Grep", "Agent"]
    episode = play(gateway, task, claude(allowed_tools=tools), policy)
    assert_solved(episode)
    assert len(episode.trajectories) == 2
    main, side = sorted(episode.trajectories, key=lambda t: -t.num_turns)
    assert SUBAGENT_TASK in decoded(gateway, side.prompt_ids)
    assert task.problem_statement[:60] not in decoded(gateway, side.prompt_ids)
    # The main conversation went on in its own chain after the subagent answered.
    assert main.num_turns == 3 and "holds README.md" in decoded(gateway, main.response_ids)


def test_claude_code_compaction_opens_a_new_chain(gateway, task) -> None:
    policy = ScriptedAgentPolicy(task, "Bash", "command")
    episode = play(gateway, task, claude(env=CLAUDE_COMPACTS_EARLY), policy)
    assert_solved(episode)
    assert len(episode.trajectories) == 2
    before, after = sorted(episode.trajectories, key=lambda t: t.chain_id)
    # The summary request continues the conversation it summarises; the conversation that
    # resumes from the summary is a rewritten history: a new chain.
    assert SUMMARY in decoded(gateway, before.response_ids)
    assert SUMMARY in decoded(gateway, after.prompt_ids)
    assert "git apply" not in decoded(gateway, after.prompt_ids)


def test_codex_compaction_summary_and_resumed_conversation_have_chains_of_their_own(
    gateway, task
) -> None:
    policy = ScriptedAgentPolicy(task, "exec_command", "cmd", long_output=True)
    episode = play(gateway, task, codex(extra_args=CODEX_COMPACTS_AFTER_BIG_OUTPUT), policy)
    assert_solved(episode)
    assert len(episode.trajectories) == 3
    main, summary, resumed = sorted(episode.trajectories, key=lambda t: t.chain_id)
    assert main.num_turns == 2 and "seq 1 3000" in decoded(gateway, main.response_ids)
    assert decoded(gateway, summary.response_ids).startswith("<analysis>")
    assert SUMMARY in decoded(gateway, resumed.prompt_ids)
    assert "seq 1 3000" not in decoded(gateway, resumed.prompt_ids)


def test_claude_code_stopped_by_its_own_turn_limit_ends_with_max_turns(gateway, task) -> None:
    policy = FixedReply("Looking." + tool_call("Bash", {"command": "true"}))
    episode = play(gateway, task, claude(max_turns=2), policy)
    assert episode.result.exit_reason == ExitReason.MAX_TURNS, episode.result.info
    assert episode.result.steps == 2
    assert tito_violations(episode.trajectories, episode.calls) == []


@pytest.mark.parametrize("cli", ["claude_code", "codex"])
def test_a_reply_cut_by_the_token_limit_ends_with_max_tokens(gateway, task, cli) -> None:
    config = claude() if cli == "claude_code" else codex()
    episode = play(gateway, task, config, FixedReply("words " * 100), sampling={"max_tokens": 16})
    assert episode.result.exit_reason == ExitReason.MAX_TOKENS, episode.result.info
    assert all(call.finish_reason == "length" for call in episode.calls)
    assert tito_violations(episode.trajectories, episode.calls) == []


def test_a_missing_cli_fails_before_the_episode_with_how_to_install_it(
    gateway, task, tmp_path: Path
) -> None:
    from uni_agent_core.harness.agent_clis import AgentCliError

    policy = ScriptedAgentPolicy(task, "Bash", "command")
    with pytest.raises(AgentCliError, match="is not installed under .*make setup"):
        play(gateway, task, claude(cli_prefix=tmp_path), policy)
