"""OpenAI function schemas of agent-rl's tools, as harnesses send them to the gateway.

For now this holds the `shell` tool used by demos and benchmarks; the tool implementations
(shell, editor, submit, finish) and their pydantic-derived schemas come with the harness work.
"""

from __future__ import annotations

from typing import Any

SHELL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command in the repository and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command"}},
            "required": ["command"],
        },
    },
}
