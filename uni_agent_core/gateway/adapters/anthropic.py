"""The Anthropic Messages wire adapter, inbound: payload -> `ChatRequest`, and error envelopes.

Pure functions, no server or session state. The lowering produces exactly the OpenAI-shaped
messages the OpenAI adapter produces for the same conversation, so both protocols yield the same
tokens: top-level `system` becomes the first system message; in a user turn consecutive `text`
blocks become one user message and each `tool_result` its own `tool` message, in block order;
an assistant turn becomes one message with its text, `tool_use` blocks as tool calls and
`thinking` blocks as `reasoning_content`. Texts of several blocks are joined with newlines.

Top-level keys are checked against an allowlist; `metadata` and `thinking` are accepted and
ignored (the gateway never emits thinking blocks: any reasoning the model writes stays inside the
text block), and forcing tool use (`tool_choice` `any`/`tool`), images, documents and server
tools are a 400 naming the field.

Rendering a `ChatChoice` back to the wire (messages, stream events, SSE framing) lives in
`adapters.anthropic_render`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from uni_agent_core.gateway.adapters.errors import (
    WireError,
    check_tool_results,
    check_top_p,
    optional_bool,
    optional_int,
    optional_number,
    optional_str,
    reject_unknown_keys,
    require_list,
    require_object,
    require_str,
    type_name,
)
from uni_agent_core.gateway.history import HistoryCache, lower_history
from uni_agent_core.gateway.request import (
    ChatRequest,
    Message,
    SamplingOverrides,
    ToolCall,
)

_ALLOWED_KEYS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "metadata",
        "thinking",
    }
)
_TOOL_KEYS = frozenset({"type", "name", "description", "input_schema", "cache_control"})
_UNSUPPORTED_MEDIA = {"image": "images", "document": "documents"}

AnthropicErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
]
_ERROR_TYPES: dict[int, AnthropicErrorType] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def parse_anthropic_request(payload: Any, history: HistoryCache | None = None) -> ChatRequest:
    """Lower a Messages API request body to a `ChatRequest`.

    Args:
        payload: The decoded JSON body.
        history: the session's memo of its last history; messages it vouches for are not
            lowered again (see `gateway/history.py`).

    Returns:
        The provider-neutral request (`n` is always 1: the Messages API has no `n`).

    Raises:
        WireError: (400) for a key outside the allowlist, a missing `max_tokens`, a malformed
            field, images or documents, server tools, or forced tool use; the message names the
            field.
    """
    body = require_object(payload, "request body")
    reject_unknown_keys(body, _ALLOWED_KEYS, "")
    optional_str(body.get("model"), "model")
    if body.get("metadata") is not None:
        require_object(body["metadata"], "metadata")
    if body.get("thinking") is not None:
        require_object(body["thinking"], "thinking")
    if body.get("max_tokens") is None:
        raise WireError(
            "max_tokens is required by the Messages API; set it to the most tokens to sample",
            param="max_tokens",
        )

    system = body.get("system")
    head = _parse_system(system)
    raw_messages = require_list(body.get("messages"), "messages")
    if not raw_messages:
        raise WireError("messages must contain at least one message", param="messages")
    messages = lower_history("anthropic", system, head, raw_messages, _parse_message, history)
    check_tool_results(raw_messages, messages, history, _tool_uses, _tool_results)

    tools = _parse_tools(body.get("tools"))
    if _parse_tool_choice(body.get("tool_choice")) == "none":
        tools = None

    # Every field is validated above; `model_construct` keeps the lazily lowered history.
    return ChatRequest.model_construct(
        messages=messages,
        tools=tools,
        sampling=SamplingOverrides(
            temperature=optional_number(body.get("temperature"), "temperature", minimum=0.0),
            top_p=check_top_p(body.get("top_p"), "top_p"),
            top_k=optional_int(body.get("top_k"), "top_k", minimum=1),
            max_tokens=optional_int(body.get("max_tokens"), "max_tokens", minimum=1),
            stop=_parse_stop_sequences(body.get("stop_sequences")),
        ),
        stream=optional_bool(body.get("stream"), "stream") or False,
    )


def _tool_uses(raw: dict[str, Any]) -> Iterable[str]:
    content = raw.get("content") if raw.get("role") == "assistant" else None
    if not isinstance(content, list):
        return ()
    return [
        block["id"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "tool_use"
        and isinstance(block.get("id"), str)
    ]


def _tool_results(raw: dict[str, Any], i: int) -> Iterable[tuple[str, str, str]]:
    content = raw.get("content") if raw.get("role") == "user" else None
    if not isinstance(content, list):
        return ()
    return [
        (
            block["tool_use_id"],
            f"messages.{i}.content.{k}",
            f"unexpected `tool_use_id` found in `tool_result` blocks: {block['tool_use_id']}. "
            "Each `tool_result` block must have a corresponding `tool_use` block in an earlier "
            "message",
        )
        for k, block in enumerate(content)
        if isinstance(block, dict)
        and block.get("type") == "tool_result"
        and isinstance(block.get("tool_use_id"), str)
    ]


def _parse_system(value: Any) -> list[Message]:
    if value is None:
        return []
    if isinstance(value, str):
        return [Message(role="system", content=value)]
    return [Message(role="system", content=_join_text_blocks(value, "system"))]


def _join_text_blocks(value: Any, path: str) -> str:
    """Join a list of `text` blocks (as in `system` or a `tool_result`) with newlines."""
    texts: list[str] = []
    for k, raw_block in enumerate(require_list(value, path)):
        block_path = f"{path}[{k}]"
        block = require_object(raw_block, block_path)
        block_type = block.get("type")
        if block_type == "text":
            texts.append(require_str(block.get("text"), f"{block_path}.text"))
        elif block_type in _UNSUPPORTED_MEDIA:
            raise WireError(
                f"{block_path}: {_UNSUPPORTED_MEDIA[block_type]} are not supported; send text only",
                param=block_path,
            )
        else:
            raise WireError(
                f"{block_path}.type: expected a 'text' block, got {block_type!r}",
                param=f"{block_path}.type",
            )
    return "\n".join(texts)


def _parse_message(raw: Any, i: int) -> list[Message]:
    path = f"messages[{i}]"
    message = require_object(raw, path)
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise WireError(
            f"{path}.role: unsupported role {role!r}; use 'user' or 'assistant' (put the system "
            "prompt in the top-level 'system' field)",
            param=f"{path}.role",
        )
    content = message.get("content")
    if isinstance(content, str):
        return [Message(role=role, content=content)]
    if not isinstance(content, list):
        raise WireError(
            f"{path}.content must be a string or an array of content blocks, got "
            f"{type_name(content)}",
            param=f"{path}.content",
        )
    blocks = content
    if role == "user":
        return _parse_user_blocks(blocks, f"{path}.content")
    return [_parse_assistant_blocks(blocks, f"{path}.content")]


def _media_error(block_type: str, block_path: str) -> WireError:
    return WireError(
        f"{block_path}: {_UNSUPPORTED_MEDIA[block_type]} are not supported; send text only",
        param=block_path,
    )


def _parse_user_blocks(blocks: list[Any], path: str) -> list[Message]:
    messages: list[Message] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            messages.append(Message(role="user", content="\n".join(pending)))
            pending.clear()

    for k, raw_block in enumerate(blocks):
        block_path = f"{path}[{k}]"
        block = require_object(raw_block, block_path)
        block_type = block.get("type")
        if block_type == "text":
            pending.append(require_str(block.get("text"), f"{block_path}.text"))
        elif block_type == "tool_result":
            flush()
            messages.append(_parse_tool_result(block, block_path))
        elif block_type in _UNSUPPORTED_MEDIA:
            raise _media_error(block_type, block_path)
        else:
            raise WireError(
                f"{block_path}.type: unsupported block {block_type!r} in a user message; use "
                "'text' or 'tool_result'",
                param=f"{block_path}.type",
            )
    flush()
    return messages or [Message(role="user", content="")]


def _parse_tool_result(block: dict[str, Any], path: str) -> Message:
    tool_use_id = require_str(block.get("tool_use_id"), f"{path}.tool_use_id")
    optional_bool(block.get("is_error"), f"{path}.is_error")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = _join_text_blocks(content, f"{path}.content")
    return Message(role="tool", content=text, tool_call_id=tool_use_id)


def _parse_assistant_blocks(blocks: list[Any], path: str) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for k, raw_block in enumerate(blocks):
        block_path = f"{path}[{k}]"
        block = require_object(raw_block, block_path)
        block_type = block.get("type")
        if block_type == "text":
            texts.append(require_str(block.get("text"), f"{block_path}.text"))
        elif block_type == "tool_use":
            calls.append(
                ToolCall(
                    id=optional_str(block.get("id"), f"{block_path}.id"),
                    name=require_str(block.get("name"), f"{block_path}.name"),
                    arguments=require_object(block.get("input"), f"{block_path}.input"),
                )
            )
        elif block_type == "thinking":
            thoughts.append(require_str(block.get("thinking"), f"{block_path}.thinking"))
        elif block_type in _UNSUPPORTED_MEDIA:
            raise _media_error(block_type, block_path)
        else:
            raise WireError(
                f"{block_path}.type: unsupported block {block_type!r} in an assistant message; "
                "use 'text', 'tool_use' or 'thinking'",
                param=f"{block_path}.type",
            )
    return Message(
        role="assistant",
        content="\n".join(texts),
        tool_calls=calls or None,
        reasoning_content="\n".join(thoughts) if thoughts else None,
    )


def _parse_tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    tools: list[dict[str, Any]] = []
    for k, raw_tool in enumerate(require_list(value, "tools")):
        path = f"tools[{k}]"
        tool = require_object(raw_tool, path)
        tool_type = tool.get("type")
        if tool_type not in (None, "custom"):
            raise WireError(
                f"{path}.type: server tool {tool_type!r} is not supported; declare it as a "
                "custom tool with name, description and input_schema",
                param=f"{path}.type",
            )
        reject_unknown_keys(tool, _TOOL_KEYS, path)
        name = require_str(tool.get("name"), f"{path}.name")
        if not name:
            raise WireError(f"{path}.name must not be empty", param=f"{path}.name")
        spec: dict[str, Any] = {"name": name}
        description = optional_str(tool.get("description"), f"{path}.description")
        if description is not None:
            spec["description"] = description
        spec["parameters"] = require_object(tool.get("input_schema"), f"{path}.input_schema")
        tools.append({"type": "function", "function": spec})
    return tools or None


def _parse_tool_choice(value: Any) -> str:
    if value is None:
        return "auto"
    choice = require_object(value, "tool_choice")
    choice_type = choice.get("type")
    optional_bool(choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use")
    if choice_type in ("auto", "none"):
        return choice_type
    if choice_type in ("any", "tool"):
        raise WireError(
            f"tool_choice.type {choice_type!r} is not supported: forcing tool use would "
            "constrain sampling; use 'auto' or 'none'",
            param="tool_choice.type",
        )
    raise WireError(
        f"tool_choice.type must be 'auto' or 'none', got {choice_type!r}",
        param="tool_choice.type",
    )


def _parse_stop_sequences(value: Any) -> list[str]:
    if value is None:
        return []
    stops = require_list(value, "stop_sequences")
    for k, stop in enumerate(stops):
        if not require_str(stop, f"stop_sequences[{k}]"):
            raise WireError(f"stop_sequences[{k}] must not be empty", param=f"stop_sequences[{k}]")
    return list(stops)


def anthropic_error(
    status: int, message: str, type_: AnthropicErrorType | None = None
) -> tuple[int, dict[str, Any]]:
    """An Anthropic error envelope `{"type": "error", "error": {type, message}}` with its status.

    Args:
        status: HTTP status code.
        message: Human-readable reason.
        type_: Error type; derived from `status` when None (400 `invalid_request_error`, 401
            `authentication_error`, 403 `permission_error`, 404 `not_found_error`, 413
            `request_too_large`, 429 `rate_limit_error`, 529 `overloaded_error`, other 5xx
            `api_error`, other 4xx `invalid_request_error`).

    Returns:
        `(status, body)`.
    """
    if type_ is None:
        default: AnthropicErrorType = "api_error" if status >= 500 else "invalid_request_error"
        type_ = _ERROR_TYPES.get(status, default)
    return status, {"type": "error", "error": {"type": type_, "message": message}}


def anthropic_wire_error(error: WireError) -> tuple[int, dict[str, Any]]:
    """The Anthropic envelope for a `WireError` raised while parsing a request."""
    return anthropic_error(error.status, error.message)
