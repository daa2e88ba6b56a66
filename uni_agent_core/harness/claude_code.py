"""The Claude Code preset: the real `claude` CLI, black-box, against the session's Anthropic URL.

`claude -p <task prompt>` runs in the task's repository with a private home next to it (outside
the diff), the session's `ANTHROPIC_BASE_URL` and key, the endpoint's model name, the configured
tools only, permissions bypassed (the sandbox is the boundary), and with telemetry, error
reporting, the auto-updater and all other non-essential traffic turned off, so its only
traffic is its model calls. Its title, summary and subagent calls reach the gateway like any
other call and land in chains of their own. docs/harnesses.md says which gateway features it uses.
"""

from __future__ import annotations

import json

from uni_agent_core.config.harness import ClaudeCodeHarnessConfig
from uni_agent_core.harness.agent_clis import CLAUDE_CODE, AgentCliHarness, last_json_line
from uni_agent_core.harness.base import Endpoint
from uni_agent_core.harness.blackbox import AgentDir, AgentLaunch
from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.types import ExitReason, TaskSpec

QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    # bypassPermissions is refused to root unless the process says it is sandboxed.
    "IS_SANDBOX": "1",
}
"""Claude Code's switches for an offline, unattended run."""


class ClaudeCodeHarness(AgentCliHarness):
    """Runs Claude Code on one task (see the module docstring)."""

    cli = CLAUDE_CODE
    config: ClaudeCodeHarnessConfig

    def agent_ending(self, exit_code: int, stdout: str) -> tuple[ExitReason, str] | None:
        """From the `--output-format json` result: its own turn limit is `max_turns`, a reply
        cut by the token limit or a prompt over the context `max_tokens`."""
        result = last_json_line(stdout)
        if result is None or result.get("type") != "result":
            return None
        detail = str(result.get("result") or result.get("subtype") or "")[:500]
        if result.get("subtype") == "error_max_turns":
            return ExitReason.MAX_TURNS, f"Claude Code reached --max-turns {self.config.max_turns}"
        if result.get("api_error") == "max_output_tokens" or "prompt is too long" in detail:
            return ExitReason.MAX_TOKENS, f"Claude Code: {detail}"
        return None

    async def launch(
        self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint, agent_dir: AgentDir
    ) -> AgentLaunch:
        config = self.config
        executable = await self.executable(sandbox)
        home = agent_dir.process_path("home")
        # An onboarded profile: no first-run screens, no API-key approval prompt.
        profile = {"hasCompletedOnboarding": True, "bypassPermissionsModeAccepted": True}
        await sandbox.write_file(agent_dir.sandbox_path("home/.claude.json"), json.dumps(profile))
        command = [
            str(executable),
            "-p",
            self.task_prompt(task),
            "--model",
            endpoint.model,
            "--max-turns",
            str(config.max_turns),
            "--tools",
            ",".join(config.allowed_tools),
            "--allowedTools",
            ",".join(config.allowed_tools),
            "--permission-mode",
            "bypassPermissions",
            "--strict-mcp-config",
            "--output-format",
            "json",
            *config.extra_args,
        ]
        env = {**QUIET_ENV, **config.env, "HOME": home}
        return AgentLaunch(command=command, env=env, timeout_s=config.timeout_s)
