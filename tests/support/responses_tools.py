"""Tools as OpenAI Responses clients declare them (Codex's kinds), for the gateway's tests."""

from __future__ import annotations

from pathlib import Path

CODEX_REQUEST = (
    Path(__file__).parents[1]
    / "core"
    / "gateway"
    / "fixtures"
    / "codex_0.169.0_responses_request.json"
)
"""A trimmed request body of Codex 0.169.0 (every key, item and tool type kept)."""

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    "strict": False,
}
"""A function tool, flat as the Responses API declares it."""

PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
"""A custom (freeform) tool with a grammar, like Codex's `apply_patch`."""

AGENTS = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
}
"""A namespace of tools, like Codex's `multi_agent_v1`."""
