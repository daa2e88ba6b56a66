"""The tool contract and the tool set a harness offers a model.

A tool is a pydantic arguments model (one docstring per field, which becomes the JSON schema the
model sees), an OpenAI function schema derived from it, and `async run(sandbox, args) ->
ToolResult`. `ToolSet` builds tools from their names, lists their schemas and dispatches calls.

A model's malformed call (unknown tool, invalid JSON, a missing or mistyped field) is an
observation, not a crash: `ToolSet.dispatch` answers it with `ToolResult(error=True)` and a message
that names the field and the fix. Failures of the sandbox itself (`SandboxError`) propagate to the
harness, whose error policy decides between retrying and ending the episode.

Tools keep per-episode state (the shell's working directory, the editor's undo history): build a
fresh `ToolSet` for every episode.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from uni_agent_core.sandbox.base import Sandbox

DEFAULT_MAX_OUTPUT_CHARS = 16_000
"""Observation length above which output is clipped (matches `max_observation_chars`)."""

_MIN_CLIP_CHARS = 128


class ToolResult(BaseModel):
    """What one tool call returned to the model."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    output: str
    """The observation shown to the model."""
    error: bool = False
    """The call failed (bad arguments, non-zero exit, timeout, bad path); the harness's
    `on_tool_error` policy decides whether the episode goes on."""
    done: bool = False
    """The call ends the episode (`submit`, `finish`)."""
    exit_code: int | None = None
    """The command's exit status, for tools that run one (`shell`); None after a timeout."""


class ToolArgs(BaseModel):
    """Base of tool argument models: unknown keys are errors, field docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


ArgsT = TypeVar("ArgsT", bound=ToolArgs)


class Tool(ABC, Generic[ArgsT]):
    """One tool: a name, a description, an arguments model and an async `run`."""

    name: ClassVar[str]
    """The function name the model calls."""
    description: ClassVar[str]
    """What the tool does, as the model reads it."""
    args_model: ClassVar[type[ToolArgs]]
    """The pydantic model that validates the call's arguments and yields its JSON schema."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema of this tool.

        Returns:
            `{"type": "function", "function": {"name", "description", "parameters"}}`.
        """
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": function_parameters(self.args_model),
            },
        }

    @abstractmethod
    async def run(self, sandbox: Sandbox, args: ArgsT) -> ToolResult:
        """Execute one validated call in `sandbox`.

        Args:
            sandbox: the episode's sandbox.
            args: the validated arguments.

        Returns:
            The observation; `error=True` for failures the model should see.
        """


def function_parameters(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of `model`, simplified for function calling.

    Pydantic's titles are dropped, `X | None = None` fields become plain optional `X` (small
    models handle `anyOf` poorly), and the model's own docstring is left out (the tool's
    description says what the tool does).

    Args:
        model: a tool's arguments model.

    Returns:
        A JSON schema object for the `parameters` of an OpenAI function.
    """
    schema = _simplify(model.model_json_schema())
    schema.pop("description", None)
    schema.setdefault("properties", {})
    return schema


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's function schema in about half the prompt tokens: the first sentence of its
    description, its parameters' names, types and constraints without their descriptions.

    Every turn of an episode attends to the tool list; for a small model on a small host it is
    most of the context (`editor` and `submit` in SmolLM2's chat template: 732 prompt tokens in
    full, 352 compact). What a call must look like stays: names, enums, required fields.

    Args:
        schema: `{"type": "function", "function": {"name", "description", "parameters"}}`.

    Returns:
        A new schema of the same shape.
    """
    function = schema["function"]
    description = function.get("description", "")
    first_sentence = description.split(". ", 1)[0].rstrip(".")
    parameters = {
        key: value for key, value in function["parameters"].items() if key != "additionalProperties"
    }
    parameters["properties"] = {
        name: {key: value for key, value in spec.items() if key != "description"}
        for name, spec in parameters.get("properties", {}).items()
    }
    return {
        **schema,
        "function": {
            **function,
            "description": f"{first_sentence}." if first_sentence else "",
            "parameters": parameters,
        },
    }


def _simplify(node: Any) -> Any:
    if isinstance(node, list):
        return [_simplify(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: _simplify(value)
        for key, value in node.items()
        # A property *named* "title" maps to a dict and is kept; only schema titles are strings.
        if not (key == "title" and isinstance(value, str))
    }
    variants = out.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        (inner,) = (v for v in variants if v != {"type": "null"})
        out.pop("anyOf")
        if out.get("default", 0) is None:
            out.pop("default")
        out = {**inner, **out}
    return out


def clip_output(text: str, limit: int = DEFAULT_MAX_OUTPUT_CHARS) -> str:
    """Keep the head and tail of `text` so that the result has at most `limit` characters.

    The dropped middle is replaced by a line `[... N characters clipped ...]`. Clipping is
    idempotent: text within the limit comes back unchanged.

    Args:
        text: tool output.
        limit: most characters of the result; at least 128.

    Returns:
        `text`, or its head, the marker line and its tail.

    Raises:
        ValueError: when `limit` is below 128.
    """
    if limit < _MIN_CLIP_CHARS:
        raise ValueError(f"clip limit must be at least {_MIN_CLIP_CHARS} characters, got {limit}")
    if len(text) <= limit:
        return text
    # Size the marker for the largest count it could show, so the result never passes the limit.
    marker_len = len(f"\n[... {len(text)} characters clipped ...]\n")
    keep = limit - marker_len
    head, tail = text[: (keep + 1) // 2], text[len(text) - keep // 2 :]
    clipped = len(text) - len(head) - len(tail)
    return f"{head}\n[... {clipped} characters clipped ...]\n{tail}"


BUILTIN_TOOLS = ("shell", "editor", "submit", "finish")
"""Tool names `ToolSet.from_names` knows (the `tools` a ReAct recipe may list)."""


def _builtin_factories(
    exec_timeout_s: float, max_output_chars: int
) -> dict[str, Callable[[], Tool]]:
    # Imported here: the tool modules import this one for `Tool` and `ToolResult`.
    from uni_agent_core.tools.control import FinishTool, SubmitTool
    from uni_agent_core.tools.editor import EditorTool
    from uni_agent_core.tools.shell import ShellTool

    return {
        "shell": lambda: ShellTool(timeout_s=exec_timeout_s, max_output_chars=max_output_chars),
        "editor": lambda: EditorTool(timeout_s=min(exec_timeout_s, 60.0)),
        "submit": SubmitTool,
        "finish": FinishTool,
    }


class ToolSet:
    """The tools of one episode, by name: their schemas and a dispatcher for the model's calls."""

    def __init__(
        self, tools: Sequence[Tool], *, max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    ) -> None:
        """Collect tools into a set.

        Args:
            tools: tool instances; names must be unique.
            max_output_chars: every observation is clipped (head and tail kept) to this length.

        Raises:
            ValueError: on a duplicate tool name or a limit below 128.
        """
        names = [tool.name for tool in tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"each tool may appear once in a ToolSet; repeated: {duplicates}")
        if max_output_chars < _MIN_CLIP_CHARS:
            raise ValueError(
                f"max_output_chars must be at least {_MIN_CLIP_CHARS}, got {max_output_chars}"
            )
        self._tools: dict[str, Tool] = {tool.name: tool for tool in tools}
        self.max_output_chars = max_output_chars

    @classmethod
    def from_names(
        cls,
        names: Sequence[str],
        *,
        exec_timeout_s: float = 120.0,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> ToolSet:
        """Build fresh built-in tools by name, e.g. `["shell", "editor", "submit"]`.

        Args:
            names: tool names from `BUILTIN_TOOLS`, in the order the model should see them.
            exec_timeout_s: the shell's default per-command timeout (the sandbox's
                `exec_timeout_s`).
            max_output_chars: observation clip length (the harness's `max_observation_chars`).

        Returns:
            A new `ToolSet` (tools hold per-episode state; build one per episode).

        Raises:
            ValueError: on an unknown or repeated name.
        """
        factories = _builtin_factories(exec_timeout_s, max_output_chars)
        unknown = [name for name in names if name not in factories]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; choose from {list(BUILTIN_TOOLS)}")
        return cls([factories[name]() for name in names], max_output_chars=max_output_chars)

    @property
    def names(self) -> list[str]:
        """Tool names in order."""
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def schemas(self, *, compact: bool = False) -> list[dict[str, Any]]:
        """OpenAI function schemas of all tools, in order (the `tools` of a chat request);
        `compact` gives `compact_schema` of each."""
        schemas = [tool.schema() for tool in self._tools.values()]
        return [compact_schema(schema) for schema in schemas] if compact else schemas

    async def dispatch(
        self, sandbox: Sandbox, name: str, arguments: dict[str, Any] | str | None
    ) -> ToolResult:
        """Validate and run one tool call of the model.

        Args:
            sandbox: the episode's sandbox.
            name: the called function's name.
            arguments: the call's arguments, as a mapping or the JSON text the model wrote.

        Returns:
            The tool's result with its output clipped to `max_output_chars`; an unknown tool or
            bad arguments give `error=True` and a message naming the problem and the fix.

        Raises:
            SandboxError: when the sandbox itself fails (the harness's retry policy applies).
        """
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(
                output=f"Unknown tool `{name}`. Available tools: {', '.join(self._tools)}.",
                error=True,
            )
        parsed = _parse_arguments(name, arguments)
        if isinstance(parsed, ToolResult):
            return parsed
        try:
            args = tool.args_model.model_validate(parsed)
        except ValidationError as exc:
            return ToolResult(output=_describe_validation_error(tool, exc), error=True)
        result = await tool.run(sandbox, args)
        clipped = clip_output(result.output, self.max_output_chars)
        return result if clipped == result.output else result.model_copy(update={"output": clipped})


def _parse_arguments(
    name: str, arguments: dict[str, Any] | str | None
) -> dict[str, Any] | ToolResult:
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ToolResult(
                output=(
                    f"The arguments of `{name}` are not valid JSON ({exc.msg} at line {exc.lineno}"
                    f" column {exc.colno}). Send one JSON object, e.g. "
                    '{"command": "ls"}.'
                ),
                error=True,
            )
    if not isinstance(arguments, dict):
        return ToolResult(
            output=(
                f"The arguments of `{name}` must be a JSON object of named parameters, "
                f"got {type(arguments).__name__}."
            ),
            error=True,
        )
    return arguments


def _describe_validation_error(tool: Tool, exc: ValidationError) -> str:
    lines = [f"Invalid arguments for `{tool.name}`:"]
    for err in exc.errors(include_url=False):
        message = str(err["msg"]).removeprefix("Value error, ")
        field = ".".join(str(part) for part in err["loc"])
        lines.append(f"- `{field}`: {message}" if field else f"- {message}")
    fields = function_parameters(tool.args_model)["properties"]
    required = set(function_parameters(tool.args_model).get("required", []))
    params = ", ".join(f"{key}{'' if key in required else '?'}" for key in fields) or "none"
    lines.append(f"Parameters of `{tool.name}` (? = optional): {params}.")
    return "\n".join(lines)
