"""Tool-call parsers: decoded model text -> assistant content + OpenAI-style tool calls.

The gateway decodes what the model sampled and must hand the client back an assistant message.
Two formats are understood:

- `hermes` (Qwen2.5 / ChatML, our bundled template): `<tool_call>\\n{"name": ..., "arguments":
  {...}}\\n</tool_call>` blocks after the text content, one `\\n` between the content and the
  first call and between calls.
- `xml` (Qwen3-Coder): `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n
  </function>\\n</tool_call>`, the `<tool_call>` wrapper optional.

Parsing is all-or-nothing: a malformed call (`error`) or a call cut off by the token limit
(`truncated`) yields no calls and the whole raw text as content, so the client sees exactly what
the model wrote and re-rendering that turn gives back the sampled text. For well-formed hermes
output `parse` inverts the chat template exactly (content and calls).

`ToolCallStreamFilter` decides, while tokens arrive, which text is already final assistant
content; what it emits is always a prefix of the final `ParseResult.content`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from uni_agent_core.gateway.request import ToolCall

ParserName = Literal["hermes", "xml"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"


@dataclass(frozen=True)
class ParseResult:
    """The assistant message recovered from one decoded model reply.

    Invariant: when `error` is set or `truncated` is true, `tool_calls` is empty and `content`
    is the full raw text (the caller returns the reply as plain text).
    """

    content: str
    """Text outside tool calls, without the separator whitespace the template puts before calls."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Parsed calls in order; ids are None (the caller assigns them)."""
    truncated: bool = False
    """A call was opened but never closed: the model was cut off mid-call."""
    error: str | None = None
    """Why the calls could not be parsed (bad JSON, missing name, non-object arguments, ...)."""


class ToolCallParser(Protocol):
    """What the gateway and `ToolCallStreamFilter` need from a parser."""

    name: ParserName
    start_tags: tuple[str, ...]
    """Strings that open a call; the earliest one in the text ends the content."""

    def strip_separator(self, head: str) -> str:
        """Remove the separator the template puts between content and the first call."""
        ...

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        """Split a decoded reply into content and tool calls."""
        ...


def _first_start(text: str, tags: tuple[str, ...], start: int = 0) -> int:
    """Index of the earliest occurrence of any of `tags` at or after `start`, or -1."""
    hits = [i for i in (text.find(tag, start) for tag in tags) if i >= 0]
    return min(hits) if hits else -1


def _is_partial(rest: str, tags: tuple[str, ...]) -> bool:
    """Whether `rest` (non-empty) is a proper prefix of one of `tags`: a cut-off tag."""
    return bool(rest) and any(len(rest) < len(tag) and tag.startswith(rest) for tag in tags)


def _failed(text: str, *, error: str | None = None, truncated: bool = False) -> ParseResult:
    return ParseResult(content=text, tool_calls=[], truncated=truncated, error=error)


def _as_object(value: Any) -> dict[str, Any] | None:
    """`value` as a JSON object: a dict, or a string holding one; None otherwise."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return None
        if isinstance(decoded, dict):
            return decoded
    return None


class HermesParser:
    """`<tool_call>` JSON `</tool_call>` blocks (Qwen / hermes style, our chat template).

    The template renders `content`, then per call `\\n<tool_call>\\n{json}\\n</tool_call>` (no
    `\\n` before the first call when content is empty). Parsing inverts it: content is the text
    before the first `<tool_call>` minus exactly one trailing `\\n`; any whitespace may surround
    the JSON and separate calls. Non-whitespace text after a call is an error.
    """

    name: ParserName = "hermes"
    start_tags: tuple[str, ...] = (TOOL_CALL_OPEN,)

    def strip_separator(self, head: str) -> str:
        """Drop the single `\\n` the template puts between content and the first call."""
        return head[:-1] if head.endswith("\n") else head

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        """Split a decoded reply into content and tool calls.

        Args:
            text: the decoded reply, without the end-of-turn token.
            tools: unused (JSON arguments carry their own types); accepted so that all parsers
                share one signature.

        Returns:
            The parse; see `ParseResult` for the failure invariant.
        """
        del tools
        start = text.find(TOOL_CALL_OPEN)
        if start < 0:
            return ParseResult(content=text)
        content = self.strip_separator(text[:start])
        calls: list[ToolCall] = []
        pos = start
        while True:
            body_start = pos + len(TOOL_CALL_OPEN)
            end = text.find(TOOL_CALL_CLOSE, body_start)
            if end < 0:
                return _failed(text, truncated=True)
            call = self._parse_body(text[body_start:end], index=len(calls) + 1)
            if isinstance(call, str):
                return _failed(text, error=call)
            calls.append(call)
            rest = text[end + len(TOOL_CALL_CLOSE) :].lstrip()
            if not rest:
                return ParseResult(content=content, tool_calls=calls)
            if rest.startswith(TOOL_CALL_OPEN):
                pos = len(text) - len(rest)
                continue
            if _is_partial(rest, self.start_tags):
                return _failed(text, truncated=True)
            return _failed(
                text,
                error=f"tool call {len(calls)}: unexpected text after </tool_call>: {rest[:40]!r}",
            )

    @staticmethod
    def _parse_body(body: str, *, index: int) -> ToolCall | str:
        """One call's JSON; a string is the error message."""
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as exc:
            return f"tool call {index}: invalid JSON ({exc})"
        if not isinstance(payload, dict):
            return f"tool call {index}: expected a JSON object with 'name' and 'arguments'"
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            return f"tool call {index}: missing or empty 'name'"
        key = "arguments" if "arguments" in payload else "parameters"
        # A call to a function without parameters may omit them.
        arguments = _as_object(payload.get(key, {}))
        if arguments is None:
            return f"tool call {index} ({name}): '{key}' must be a JSON object"
        return ToolCall(name=name, arguments=arguments)


def _parameter_types(tools: list[dict[str, Any]] | None, function: str) -> dict[str, list[str]]:
    """JSON-schema types of `function`'s parameters, by name; empty without a schema."""
    for tool in tools or []:
        spec = tool.get("function", tool)
        if not isinstance(spec, dict) or spec.get("name") != function:
            continue
        properties = (spec.get("parameters") or {}).get("properties") or {}
        types: dict[str, list[str]] = {}
        for key, schema in properties.items():
            kind = schema.get("type") if isinstance(schema, dict) else None
            if isinstance(kind, str):
                types[key] = [kind]
            elif isinstance(kind, list):
                types[key] = [k for k in kind if isinstance(k, str)]
        return types
    return {}


def _convert_value(value: str, types: list[str]) -> Any:
    """A parameter value as JSON when the schema says it is not a string, else the text."""
    if not types or "string" in types:
        return value
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        # Qwen3-Coder's template renders Python booleans as `True`/`False`.
        if "boolean" in types and value.strip() in ("True", "False"):
            return value.strip() == "True"
        return value
    return value if isinstance(decoded, str) else decoded


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


class XmlParser:
    """Qwen3-Coder style `<function=NAME><parameter=KEY>VALUE</parameter></function>` calls.

    Each call may be wrapped in `<tool_call>...</tool_call>`. Content is the text before the
    first `<tool_call>` or `<function=`, right-stripped (Qwen3-Coder's template trims content
    and puts blank lines before calls). A value loses exactly one leading and one trailing
    newline; it stays a string unless the `tools` schema types that parameter as something
    other than `string` and the value parses as a JSON number, bool, object, array or null.
    """

    name: ParserName = "xml"
    start_tags: tuple[str, ...] = (TOOL_CALL_OPEN, FUNCTION_OPEN)

    def strip_separator(self, head: str) -> str:
        """Drop the whitespace between content and the first call."""
        return head.rstrip()

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        """Split a decoded reply into content and tool calls.

        Args:
            text: the decoded reply, without the end-of-turn token.
            tools: the request's OpenAI function tools; parameter types from their schemas
                decide which values are decoded as JSON. None keeps every value a string.

        Returns:
            The parse; see `ParseResult` for the failure invariant.
        """
        start = _first_start(text, self.start_tags)
        if start < 0:
            return ParseResult(content=text)
        content = self.strip_separator(text[:start])
        calls: list[ToolCall] = []
        pos = start
        while True:
            outcome = self._parse_call(text, pos, index=len(calls) + 1, tools=tools)
            if outcome is None:
                return _failed(text, truncated=True)
            if isinstance(outcome, str):
                return _failed(text, error=outcome)
            call, pos = outcome
            calls.append(call)
            rest = text[pos:].lstrip()
            if not rest:
                return ParseResult(content=content, tool_calls=calls)
            if rest.startswith(self.start_tags):
                pos = len(text) - len(rest)
                continue
            if _is_partial(rest, self.start_tags):
                return _failed(text, truncated=True)
            return _failed(
                text, error=f"tool call {len(calls)}: unexpected text after the call: {rest[:40]!r}"
            )

    def _parse_call(
        self, text: str, pos: int, *, index: int, tools: list[dict[str, Any]] | None
    ) -> tuple[ToolCall, int] | str | None:
        """The call starting at `pos` and the index after it; a str is an error, None a cut."""
        wrapped = text.startswith(TOOL_CALL_OPEN, pos)
        if wrapped:
            pos = _skip_space(text, pos + len(TOOL_CALL_OPEN))
        if not text.startswith(FUNCTION_OPEN, pos):
            rest = text[pos:]
            if not rest or _is_partial(rest, (FUNCTION_OPEN,)):
                return None
            return f"tool call {index}: expected <function=NAME>, got {rest[:40]!r}"
        name_end = text.find(">", pos)
        if name_end < 0:
            return None
        name = text[pos + len(FUNCTION_OPEN) : name_end].strip()
        if not _is_tag_name(name):
            return f"tool call {index}: bad function name {name!r} in <function=NAME>"
        types = _parameter_types(tools, name)
        arguments: dict[str, Any] = {}
        pos = name_end + 1
        while True:
            pos = _skip_space(text, pos)
            if text.startswith(FUNCTION_CLOSE, pos):
                pos += len(FUNCTION_CLOSE)
                break
            if not text.startswith(PARAMETER_OPEN, pos):
                rest = text[pos:]
                if not rest or _is_partial(rest, (FUNCTION_CLOSE, PARAMETER_OPEN)):
                    return None
                return f"tool call {index} ({name}): expected <parameter=KEY>, got {rest[:40]!r}"
            key_end = text.find(">", pos)
            if key_end < 0:
                return None
            key = text[pos + len(PARAMETER_OPEN) : key_end].strip()
            if not _is_tag_name(key):
                return f"tool call {index} ({name}): bad parameter name {key!r} in <parameter=KEY>"
            if key in arguments:
                return f"tool call {index} ({name}): parameter {key!r} given twice"
            value_end = text.find(PARAMETER_CLOSE, key_end + 1)
            if value_end < 0:
                return None
            value = _strip_one_newline(text[key_end + 1 : value_end])
            arguments[key] = _convert_value(value, types.get(key, []))
            pos = value_end + len(PARAMETER_CLOSE)
        if wrapped:
            pos = _skip_space(text, pos)
            if not text.startswith(TOOL_CALL_CLOSE, pos):
                rest = text[pos:]
                if not rest or _is_partial(rest, (TOOL_CALL_CLOSE,)):
                    return None
                return f"tool call {index} ({name}): expected </tool_call>, got {rest[:40]!r}"
            pos += len(TOOL_CALL_CLOSE)
        return ToolCall(name=name, arguments=arguments), pos


def _is_tag_name(name: str) -> bool:
    """A non-empty name with no whitespace or `<` (which would mean a garbled tag)."""
    return bool(name) and not any(c.isspace() or c == "<" for c in name)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def get_parser(name: ParserName) -> ToolCallParser:
    """Return a parser by format name.

    Args:
        name: `hermes` (JSON in `<tool_call>` tags) or `xml` (Qwen3-Coder `<function=...>`).

    Raises:
        ValueError: for any other name.
    """
    if name == "hermes":
        return HermesParser()
    if name == "xml":
        return XmlParser()
    raise ValueError(f"unknown tool-call parser {name!r}; use 'hermes' or 'xml'")


class ToolCallStreamFilter:
    """Streams assistant content while a reply is generated, stopping where calls begin.

    `feed` returns text that is final content: it holds back any suffix that could still turn
    into the separator plus a call tag (e.g. a trailing `\\n<tool`), and after a call tag
    appears emits nothing more (calls are parsed and sent once the reply is complete). For a
    well-formed reply everything emitted equals `ParseResult.content`; for a failed parse it is
    a prefix of the raw text, which is then the content, so the caller sends the remainder.
    """

    def __init__(self, parser: ToolCallParser | ParserName = "hermes") -> None:
        """Create a filter for one reply.

        Args:
            parser: the parser (or its name) that will parse the complete reply.
        """
        self._parser = get_parser(parser) if isinstance(parser, str) else parser
        self._pending = ""
        self._started = False

    @property
    def started(self) -> bool:
        """Whether a tool call tag has been seen."""
        return self._started

    def feed(self, delta: str) -> str:
        """Add newly decoded text; return the content that became final."""
        if self._started:
            return ""
        pending = self._pending + delta
        tags = self._parser.start_tags
        start = _first_start(pending, tags)
        if start >= 0:
            self._started = True
            self._pending = ""
            return self._parser.strip_separator(pending[:start])
        tag_start = len(pending)
        longest = max(len(tag) for tag in tags)
        for i in range(max(0, len(pending) - longest + 1), len(pending)):
            if pending[i] == "<" and _is_partial(pending[i:], tags):
                tag_start = i
                break
        ready = len(self._parser.strip_separator(pending[:tag_start]))
        self._pending = pending[ready:]
        return pending[:ready]

    def finish(self) -> str:
        """End of reply: flush held-back text unless a call started."""
        if self._started:
            return ""
        rest, self._pending = self._pending, ""
        return rest
