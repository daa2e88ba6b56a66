"""The Codex preset: the real `codex exec` CLI, black-box, against the session's Responses URL.

The harness writes a `config.toml` into a private `CODEX_HOME` next to the repository (outside
the diff): one model provider, the session's OpenAI base URL with `wire_api = "responses"` and
the session key read from `AGENT_RL_API_KEY`, no retries (a refused request is an episode's
error, not a loop), approvals off and Codex's own sandbox off (the task's sandbox is the
boundary), web search, analytics, feedback, history and the update check off. `--strict-config`
makes Codex refuse the file if a key is unknown to the pinned release. Codex has no turn limit
of its own, so `max_turns` caps the session's model calls. docs/harnesses.md says which gateway
features it uses.
"""

from __future__ import annotations

import json

from uni_agent_core.config.harness import CodexHarnessConfig
from uni_agent_core.harness.agent_clis import CODEX, AgentCliHarness, last_json_line
from uni_agent_core.harness.base import Endpoint
from uni_agent_core.harness.blackbox import AgentDir, AgentLaunch
from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.types import ExitReason, TaskSpec

API_KEY_ENV = "AGENT_RL_API_KEY"
"""The variable Codex reads the session key from (the provider's `env_key`)."""
CONTEXT_WINDOW = 32768
"""The context window Codex is told the model has (it plans compaction around it)."""


def codex_config(endpoint: Endpoint, context_window: int = CONTEXT_WINDOW) -> str:
    """The `config.toml` of one episode (TOML strings are JSON strings)."""
    lines = [
        f"model = {json.dumps(endpoint.model)}",
        'model_provider = "agent_rl"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        'web_search = "disabled"',
        f"model_context_window = {context_window}",
        "",
        "[model_providers.agent_rl]",
        'name = "agent-rl gateway"',
        f"base_url = {json.dumps(endpoint.openai_base_url)}",
        f'env_key = "{API_KEY_ENV}"',
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[history]",
        'persistence = "none"',
    ]
    return "\n".join(lines) + "\n"


class CodexHarness(AgentCliHarness):
    """Runs Codex on one task (see the module docstring)."""

    cli = CODEX
    config: CodexHarnessConfig

    def agent_ending(self, exit_code: int, stdout: str) -> tuple[ExitReason, str] | None:
        """From the `--json` events: a turn that failed on a reply cut by the token limit, or on
        the context window, is `max_tokens`."""
        for line in reversed(stdout.splitlines()):
            event = last_json_line(line)
            if event is None or event.get("type") != "turn.failed":
                continue
            message = str((event.get("error") or {}).get("message", ""))[:500]
            if "max_output_tokens" in message or "context window" in message.lower():
                return ExitReason.MAX_TOKENS, f"Codex: {message}"
            return None
        return None

    async def launch(
        self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint, agent_dir: AgentDir
    ) -> AgentLaunch:
        config = self.config
        executable = await self.executable(sandbox)
        await sandbox.write_file(agent_dir.sandbox_path("home/config.toml"), codex_config(endpoint))
        bundled = executable.parent.parent / "codex-path"  # Codex's own ripgrep
        command = [
            str(executable),
            "exec",
            "--strict-config",
            "--skip-git-repo-check",
            "--json",
            "--color",
            "never",
            *config.extra_args,
            self.task_prompt(task),
        ]
        env = {
            **config.env,
            "HOME": agent_dir.process_path("home"),
            "CODEX_HOME": agent_dir.process_path("home"),
            API_KEY_ENV: endpoint.api_key,
            "PATH": f"{bundled}:/usr/local/bin:/usr/bin:/bin",
        }
        return AgentLaunch(
            command=command, env=env, timeout_s=config.timeout_s, max_model_calls=config.max_turns
        )
