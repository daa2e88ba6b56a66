"""ToolSet: schemas from names, dispatch, and malformed calls answered as observations."""

from __future__ import annotations

import asyncio
import json
from pathlib import PurePosixPath
from typing import Any

import pytest

from uni_agent_core.sandbox.base import ExecResult, SandboxError
from uni_agent_core.tools.registry import (
    BUILTIN_TOOLS,
    ToolArgs,
    ToolResult,
    ToolSet,
    function_parameters,
)


class ScriptedSandbox:
    """Records `exec` calls and answers each with a fixed result (or raises a sandbox error)."""

    def __init__(self, result: ExecResult | None = None, fail: bool = False) -> None:
        self.workdir = PurePosixPath("/repo")
        self.result = result or ExecResult(0, "hi\n", "")
        self.fail = fail
        self.calls: list[tuple[str, float]] = []

    async def exec(self, command: str, *, timeout: float = 60.0, **_: Any) -> ExecResult:
        self.calls.append((command, timeout))
        if self.fail:
            raise SandboxError("container lost")
        return self.result


def dispatch(tools: ToolSet, name: str, arguments: Any, sandbox: Any = None) -> ToolResult:
    return asyncio.run(tools.dispatch(sandbox or ScriptedSandbox(), name, arguments))


def test_schemas_follow_the_names_in_order() -> None:
    tools = ToolSet.from_names(["shell", "editor", "submit"])
    assert tools.names == ["shell", "editor", "submit"]
    schemas = tools.schemas()
    assert [s["function"]["name"] for s in schemas] == tools.names
    for schema in schemas:
        assert schema["type"] == "function"
        assert set(schema["function"]) == {"name", "description", "parameters"}
        assert schema["function"]["parameters"]["type"] == "object"
    assert schemas[2]["function"]["parameters"]["properties"] == {}
    assert set(BUILTIN_TOOLS) == {"shell", "editor", "submit", "finish"}


def test_bad_tool_lists_are_config_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown tools \['browser'\]"):
        ToolSet.from_names(["shell", "browser"])
    with pytest.raises(ValueError, match="repeated: \\['shell'\\]"):
        ToolSet.from_names(["shell", "shell"])


def test_dispatch_runs_the_tool_with_its_timeout() -> None:
    tools = ToolSet.from_names(["shell", "submit"], exec_timeout_s=7.0)
    sandbox = ScriptedSandbox()
    result = dispatch(tools, "shell", '{"command": "echo hi"}', sandbox)
    assert result == ToolResult(output="hi\n", exit_code=0)
    ((command, timeout),) = sandbox.calls
    assert "echo hi" in command and timeout == 7.0


def test_control_tools_end_the_episode() -> None:
    tools = ToolSet.from_names(["submit", "finish"])
    assert dispatch(tools, "submit", "") == ToolResult(output="submitted", done=True)
    assert dispatch(tools, "submit", {}) == ToolResult(output="submitted", done=True)
    assert dispatch(tools, "submit", None).done
    finished = dispatch(tools, "finish", {"message": "the answer is 42"})
    assert finished == ToolResult(output="the answer is 42", done=True)
    empty = dispatch(tools, "finish", {"message": ""})
    assert empty.error and not empty.done and "`message`" in empty.output


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("browse", {}, "Unknown tool `browse`. Available tools: shell, editor, submit."),
        ("shell", '{"command": "ls"', "not valid JSON"),
        ("shell", "[1, 2]", "must be a JSON object"),
        ("shell", {}, "- `command`: Field required"),
        ("shell", {"command": 5}, "- `command`: Input should be a valid string"),
        ("shell", {"command": "ls", "cwd": "/"}, "- `cwd`: Extra inputs are not permitted"),
        ("shell", {"command": "ls", "timeout": -1}, "- `timeout`: Input should be greater than 0"),
        ("editor", {"command": "create", "path": "a"}, "`file_text` is required"),
        ("editor", {"command": "view", "path": "a", "view_range": [1]}, "`view_range`"),
        ("submit", {"now": True}, "- `now`: Extra inputs are not permitted"),
    ],
)
def test_malformed_calls_are_observations(name: str, arguments: Any, expected: str) -> None:
    tools = ToolSet.from_names(["shell", "editor", "submit"])
    sandbox = ScriptedSandbox()
    result = dispatch(tools, name, arguments, sandbox)
    assert result.error and not result.done
    assert expected in result.output
    assert sandbox.calls == []  # nothing ran


def test_validation_message_lists_the_parameters() -> None:
    tools = ToolSet.from_names(["shell"])
    result = dispatch(tools, "shell", {})
    assert result.output.splitlines() == [
        "Invalid arguments for `shell`:",
        "- `command`: Field required",
        "Parameters of `shell` (? = optional): command, timeout?.",
    ]


def test_outputs_are_clipped_and_sandbox_failures_propagate() -> None:
    tools = ToolSet.from_names(["shell"], max_output_chars=300)
    noisy = ScriptedSandbox(ExecResult(0, "z" * 10_000, ""))
    result = dispatch(tools, "shell", {"command": "yes"}, noisy)
    assert len(result.output) <= 300 and "characters clipped" in result.output
    with pytest.raises(SandboxError, match="container lost"):
        dispatch(tools, "shell", {"command": "ls"}, ScriptedSandbox(fail=True))
    with pytest.raises(ValueError, match="at least 128"):
        ToolSet.from_names(["shell"], max_output_chars=10)


def test_function_parameters_keep_a_field_named_title() -> None:
    class Args(ToolArgs):
        """Developer notes that the model does not need."""

        title: str
        """The issue title."""
        limit: int | None = None
        """Most results."""

    params = function_parameters(Args)
    assert params == {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "The issue title."},
            "limit": {"type": "integer", "description": "Most results."},
        },
        "required": ["title"],
        "additionalProperties": False,
    }


def test_compact_schemas_keep_what_a_call_must_look_like() -> None:
    tools = ToolSet.from_names(["editor", "submit"])
    full, compact = tools.schemas(), tools.schemas(compact=True)
    editor, compact_editor = full[0]["function"], compact[0]["function"]
    assert compact_editor["description"] == "View, create and edit files."
    properties = compact_editor["parameters"]["properties"]
    assert list(properties) == list(editor["parameters"]["properties"])
    assert all("description" not in spec for spec in properties.values())
    assert properties["command"]["enum"] == ["view", "create", "str_replace", "insert", "undo"]
    assert properties["view_range"] == {
        "items": {"type": "integer"},
        "maxItems": 2,
        "minItems": 2,
        "type": "array",
    }
    assert compact_editor["parameters"]["required"] == ["command", "path"]
    assert "additionalProperties" not in compact_editor["parameters"]
    assert compact[1]["function"]["name"] == "submit"
    assert len(json.dumps(compact)) < len(json.dumps(full)) / 2
    assert tools.schemas() == full  # the tools' own schemas are untouched
