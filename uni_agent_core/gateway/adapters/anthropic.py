"""The Anthropic Messages wire adapter, inbound: payload -> `ChatRequest`, and error envelopes.

Pure functions, no server or session state. The lowering produces exactly the OpenAI-shaped
messages the OpenAI adapter produces for the same conversation, so both protocols yield the same
tokens: top-level `system` becomes the first system message; in a user turn consecutive `text`
blocks become one user message and each `tool_result` its own `tool` message, in block order;
an assistant turn becomes one message with its text, `tool_use` blocks as tool calls and
`thinking` blocks as `reasoning_content`; a `system`-role message (Claude Code's environment
notes) becomes a system message at its place. Texts of several blocks are joined with newlines.

Every field Claude Code (2.1.x) and the `anthropic` SDK (`messages`, `beta.messages`,
`count_tokens`) send is decided here, against explicit allowlists (top level, message, block,
tool). Ignored fields cannot change the sampled tokens; they are named in `ChatRequest.ignored`
as dotted names without indices (`messages.content.cache_control`), which `/metrics` counts.
Refused fields would make the recorded tokens differ from what the client asked for: a 400
naming the field.

Honoured:
- `model` (any name), `messages`, `stream`, `max_tokens` (capped by the session), `temperature`,
  `top_p`, `top_k` (under the session's `sampling_override`), `stop_sequences` (single-token);
- `system` (string or text blocks); `system`-role messages (`content` string or text blocks;
  `clear_at` `never`; one with only `output_config` renders nothing); the chat template must
  render a system message after the first (`ChatCodec.mid_system`), else the session refuses it;
- `thinking` blocks in assistant turns -> `reasoning_content` (the template decides whether it
  is shown); `tool_use`, `tool_result` (text content);
- `tools` (custom: `name`, `description`, `input_schema`); `defer_loading: true` leaves the tool
  out of the prompt, as Anthropic leaves deferred tools out of its system prompt;
- `tool_choice` `auto` | `none` (`none` drops the tools).

Ignored and counted:
- top level: `metadata`, `thinking` (config: the gateway never emits thinking blocks; reasoning
  the model writes stays in the text), `output_config` (`effort`: our engine has no effort),
  `context_management` (`clear_thinking_*` edits: we emit no thinking to clear), `cache_control`,
  `service_tier`, `speed`, `inference_geo`, `diagnostics`, `billing_policy`, `fallbacks`,
  `fallback_credit_token`, `container` (an id, no skills), `mcp_servers` (empty);
- `cache_control` on any block or tool (`system.cache_control`, `messages.content.cache_control`,
  `messages.content.content.cache_control`, `tools.cache_control`); `citations` on text blocks
  (`system.citations`, `messages.content.citations`, ...); `signature` of thinking blocks;
  `redacted_thinking` blocks (opaque: `messages.content.redacted_thinking`); `caller` `direct`
  on `tool_use`; `is_error: true` on `tool_result` (the template has no slot for it);
  `output_config` on system messages (`messages.output_config`);
- tools: `strict` (constrained decoding cannot be honoured; arguments are parsed as JSON
  anyway), `eager_input_streaming`, `allowed_callers` that include `direct`, `input_examples`
  when empty; `tool_choice.disable_parallel_tool_use` when true;
- the `anthropic-beta` header (named by the server), `anthropic-version`, the `?beta=true` query.

Refused (400):
- images, documents, search results and every block of a server tool or feature we do not run
  (`server_tool_use`, `*_tool_result` of server tools, `mcp_tool_use`, `container_upload`,
  `compaction`, `tool_reference`, ...); `tool_addition`/`tool_removal` in system messages;
  `clear_at: "next_user_message"`; `toolset_name`; a `caller` other than `direct`;
- tools with a `type` other than `custom` (`web_search_20250305`, `bash_20250124`, ...), with
  `input_examples` (the prompt would lack them) or `allowed_callers` without `direct`;
- `tool_choice` `any` | `tool` (forcing tool use would constrain sampling);
- `output_config.format` (structured output) and `.task_budget`; `context_management` edits that
  drop context (`clear_tool_uses_*`, `compact_*`); `compaction`; `thread` (server-held state);
  `mcp_servers` that name a server; `container.skills`; any key not listed here.

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

_USED_KEYS = frozenset(
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
    }
)
_IGNORED_KEYS = frozenset(
    {
        "metadata",
        "thinking",
        "cache_control",
        "service_tier",
        "speed",
        "inference_geo",
        "diagnostics",
        "billing_policy",
        "fallbacks",
        "fallback_credit_token",
    }
)
# Ignored at some values, refused at others (see `_check_options`).
_CHECKED_KEYS = frozenset(
    {"output_config", "context_management", "container", "mcp_servers", "compaction", "thread"}
)
_ALLOWED_KEYS = _USED_KEYS | _IGNORED_KEYS | _CHECKED_KEYS
_COUNT_TOKENS_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "context_management",
        "mcp_servers",
        "cache_control",
        "speed",
        "billing_policy",
        "compaction",
    }
)
"""The keys of `POST /v1/messages/count_tokens` (no `max_tokens`, `stream` or sampling)."""

_MESSAGE_KEYS = frozenset({"role", "content"})
_SYSTEM_MESSAGE_KEYS = frozenset({"role", "content", "clear_at", "output_config"})
_TEXT_KEYS = frozenset({"type", "text", "cache_control", "citations"})
_TOOL_USE_KEYS = frozenset(
    {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"}
)
_TOOL_RESULT_KEYS = frozenset(
    {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}
)
_THINKING_KEYS = frozenset({"type", "thinking", "signature"})
_REDACTED_THINKING_KEYS = frozenset({"type", "data"})
_TOOL_KEYS = frozenset(
    {
        "type",
        "name",
        "description",
        "input_schema",
        "cache_control",
        "defer_loading",
        "strict",
        "eager_input_streaming",
        "allowed_callers",
        "input_examples",
    }
)
_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
_THINKING_TYPES = frozenset({"adaptive", "enabled", "disabled"})
_UNSUPPORTED_MEDIA = {
    "image": "images are not supported; send text only",
    "document": "documents are not supported; send text only",
    "search_result": "search results are not supported; send them as text",
    "tool_reference": "tool references are not supported: the gateway loads no deferred tools; "
    "send the tool in `tools` without defer_loading",
}

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
        The provider-neutral request (`n` is always 1: the Messages API has no `n`), with the
        fields it ignored in `ignored`.

    Raises:
        WireError: (400) for a key outside the allowlists, a missing `max_tokens`, a malformed
            field, or a refused one (see the module docstring); the message names the field.
    """
    body = require_object(payload, "request body")
    reject_unknown_keys(body, _ALLOWED_KEYS, "")
    if body.get("max_tokens") is None:
        raise WireError(
            "max_tokens is required by the Messages API; set it to the most tokens to sample",
            param="max_tokens",
        )
    return _parse(body, history)


def parse_anthropic_count_tokens(payload: Any) -> ChatRequest:
    """Lower a `POST /v1/messages/count_tokens` body (a Messages request without `max_tokens`,
    `stream` and sampling) to a `ChatRequest`, remembering nothing.

    Raises:
        WireError: (400) as `parse_anthropic_request`, and for a key count_tokens does not take.
    """
    body = require_object(payload, "request body")
    reject_unknown_keys(body, _COUNT_TOKENS_KEYS, "")
    return _parse(body, None)


def _parse(body: dict[str, Any], history: HistoryCache | None) -> ChatRequest:
    ignored: set[str] = set()
    optional_str(body.get("model"), "model")
    _check_options(body, ignored)

    system = body.get("system")
    head = _parse_system(system, ignored)
    raw_messages = require_list(body.get("messages"), "messages")
    if not raw_messages:
        raise WireError("messages must contain at least one message", param="messages")
    found: set[str] = set()

    def lower(raw: Any, i: int) -> list[Message]:
        return _parse_message(raw, i, found)

    messages = lower_history("anthropic", system, head, raw_messages, lower, history)
    check_tool_results(raw_messages, messages, history, _tool_uses, _tool_results)
    if history is not None:
        # Fields of the messages the memo vouched for (not lowered again) come from the memo.
        if messages.raw_known:
            found |= history.ignored_fields
        history.ignored_fields = frozenset(found)
    ignored |= found

    tools = _parse_tools(body.get("tools"), ignored)
    if _parse_tool_choice(body.get("tool_choice"), ignored) == "none":
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
        ignored=tuple(sorted(ignored)),
    )


def _check_options(body: dict[str, Any], ignored: set[str]) -> None:
    """Validate the top-level options that do not shape the prompt; note the ignored ones."""
    ignored.update(key for key in _IGNORED_KEYS if body.get(key) is not None)
    if body.get("metadata") is not None:
        require_object(body["metadata"], "metadata")
        optional_str(body["metadata"].get("user_id"), "metadata.user_id")
    if body.get("thinking") is not None:
        thinking = require_object(body["thinking"], "thinking")
        if thinking.get("type") not in _THINKING_TYPES:
            raise WireError(
                f"thinking.type must be one of {', '.join(sorted(_THINKING_TYPES))}, got "
                f"{thinking.get('type')!r}",
                param="thinking.type",
            )
    if body.get("output_config") is not None:
        _check_output_config(body["output_config"], "output_config")
        ignored.add("output_config")
    if body.get("context_management") is not None:
        _check_context_management(body["context_management"])
        ignored.add("context_management")
    container = body.get("container")
    if container is not None:
        if isinstance(container, dict):
            if container.get("skills"):
                raise WireError(
                    "container.skills is not supported: skills would add instructions the "
                    "gateway cannot render; remove them",
                    param="container.skills",
                )
        else:
            require_str(container, "container")
        ignored.add("container")
    servers = body.get("mcp_servers")
    if servers is not None:
        if require_list(servers, "mcp_servers"):
            raise WireError(
                "mcp_servers is not supported: the gateway connects to no MCP server; expose "
                "its tools as custom tools and run them in the client",
                param="mcp_servers",
            )
        ignored.add("mcp_servers")
    for key, reason in (
        ("compaction", "the gateway does not summarise conversations; compact in the client"),
        ("thread", "the gateway holds no conversation state; send the whole conversation"),
    ):
        if body.get(key) is not None:
            raise WireError(f"{key} is not supported: {reason}", param=key)


def _check_output_config(value: Any, path: str, *, top_level: bool = True) -> None:
    config = require_object(value, path)
    allowed = {"effort", "format", "task_budget"} if top_level else {"effort"}
    reject_unknown_keys(config, frozenset(allowed), path)
    effort = config.get("effort")
    if effort is not None and effort not in _EFFORTS:
        raise WireError(
            f"{path}.effort must be one of {', '.join(sorted(_EFFORTS))}, got {effort!r}",
            param=f"{path}.effort",
        )
    if config.get("format") is not None:
        raise WireError(
            f"{path}.format is not supported: structured output would constrain sampling, which "
            "the gateway cannot do",
            param=f"{path}.format",
        )
    if config.get("task_budget") is not None:
        raise WireError(
            f"{path}.task_budget is not supported: the model would be told a budget the "
            "gateway cannot render",
            param=f"{path}.task_budget",
        )


def _check_context_management(value: Any) -> None:
    config = require_object(value, "context_management")
    reject_unknown_keys(config, frozenset({"edits"}), "context_management")
    edits = config.get("edits")
    for k, raw_edit in enumerate(require_list(edits, "context_management.edits") if edits else []):
        path = f"context_management.edits[{k}]"
        edit_type = require_object(raw_edit, path).get("type")
        if not (isinstance(edit_type, str) and edit_type.startswith("clear_thinking_")):
            raise WireError(
                f"{path}.type {edit_type!r} is not supported: only clear_thinking edits, which "
                "change nothing here (the gateway emits no thinking), are accepted; an edit "
                "that drops or summarises context would make the recorded prompt differ from "
                "what the client asked for",
                param=f"{path}.type",
            )


def _note(block: dict[str, Any], keys: Iterable[str], where: str, found: set[str]) -> None:
    """Add `<where>.<key>` to `found` for each of `keys` the block carries (non-null)."""
    for key in keys:
        if block.get(key) is not None:
            found.add(f"{where}.{key}")


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


def _parse_system(value: Any, ignored: set[str]) -> list[Message]:
    if value is None:
        return []
    if isinstance(value, str):
        return [Message(role="system", content=value)]
    return [Message(role="system", content=_join_text_blocks(value, "system", "system", ignored))]


def _unsupported_block(block_type: Any, block_path: str, allowed: str, where: str) -> WireError:
    if block_type in _UNSUPPORTED_MEDIA:
        return WireError(f"{block_path}: {_UNSUPPORTED_MEDIA[block_type]}", param=block_path)
    return WireError(
        f"{block_path}.type: unsupported block {block_type!r} {where}; use {allowed}",
        param=f"{block_path}.type",
    )


def _text(block: dict[str, Any], path: str, where: str, found: set[str]) -> str:
    reject_unknown_keys(block, _TEXT_KEYS, path)
    _note(block, ("cache_control", "citations"), where, found)
    return require_str(block.get("text"), f"{path}.text")


def _join_text_blocks(value: Any, path: str, where: str, found: set[str]) -> str:
    """Join a list of `text` blocks (as in `system` or a `tool_result`) with newlines."""
    texts: list[str] = []
    for k, raw_block in enumerate(require_list(value, path)):
        block_path = f"{path}[{k}]"
        block = require_object(raw_block, block_path)
        block_type = block.get("type")
        if block_type != "text":
            raise _unsupported_block(block_type, block_path, "'text'", "here")
        texts.append(_text(block, block_path, where, found))
    return "\n".join(texts)


def _parse_message(raw: Any, i: int, found: set[str]) -> list[Message]:
    path = f"messages[{i}]"
    message = require_object(raw, path)
    role = message.get("role")
    if role == "system":
        return _parse_system_message(message, path, found)
    if role not in ("user", "assistant"):
        raise WireError(
            f"{path}.role: unsupported role {role!r}; use 'user', 'assistant' or 'system'",
            param=f"{path}.role",
        )
    reject_unknown_keys(message, _MESSAGE_KEYS, path)
    content = message.get("content")
    if isinstance(content, str):
        return [Message(role=role, content=content)]
    if not isinstance(content, list):
        raise WireError(
            f"{path}.content must be a string or an array of content blocks, got "
            f"{type_name(content)}",
            param=f"{path}.content",
        )
    if role == "user":
        return _parse_user_blocks(content, f"{path}.content", found)
    return [_parse_assistant_blocks(content, f"{path}.content", found)]


def _parse_system_message(message: dict[str, Any], path: str, found: set[str]) -> list[Message]:
    """A `system`-role message: a system message at its place, or nothing without content."""
    reject_unknown_keys(message, _SYSTEM_MESSAGE_KEYS, path)
    clear_at = message.get("clear_at")
    if clear_at == "next_user_message":
        raise WireError(
            f"{path}.clear_at 'next_user_message' is not supported: the gateway keeps every "
            "message of the conversation in front of the model; use 'never'",
            param=f"{path}.clear_at",
        )
    if clear_at not in (None, "never"):
        raise WireError(
            f"{path}.clear_at must be 'never' or 'next_user_message', got {clear_at!r}",
            param=f"{path}.clear_at",
        )
    if message.get("output_config") is not None:
        _check_output_config(message["output_config"], f"{path}.output_config", top_level=False)
        found.add("messages.output_config")
    content = message.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [Message(role="system", content=content)]
    if not isinstance(content, list):
        raise WireError(
            f"{path}.content must be a string or an array of text blocks, got {type_name(content)}",
            param=f"{path}.content",
        )
    for k, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") in ("tool_addition", "tool_removal"):
            raise WireError(
                f"{path}.content[{k}]: mid-conversation tool changes are not supported; send the "
                "new tool list in `tools` (a new tool list opens a new chain)",
                param=f"{path}.content[{k}]",
            )
    text = _join_text_blocks(content, f"{path}.content", "messages.content", found)
    return [Message(role="system", content=text)]


def _parse_user_blocks(blocks: list[Any], path: str, found: set[str]) -> list[Message]:
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
            pending.append(_text(block, block_path, "messages.content", found))
        elif block_type == "tool_result":
            flush()
            messages.append(_parse_tool_result(block, block_path, found))
        else:
            raise _unsupported_block(
                block_type, block_path, "'text' or 'tool_result'", "in a user message"
            )
    flush()
    return messages or [Message(role="user", content="")]


def _parse_tool_result(block: dict[str, Any], path: str, found: set[str]) -> Message:
    reject_unknown_keys(block, _TOOL_RESULT_KEYS, path)
    _refuse_toolset(block, path)
    tool_use_id = require_str(block.get("tool_use_id"), f"{path}.tool_use_id")
    if optional_bool(block.get("is_error"), f"{path}.is_error"):
        found.add("messages.content.is_error")
    _note(block, ("cache_control",), "messages.content", found)
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = _join_text_blocks(content, f"{path}.content", "messages.content.content", found)
    return Message(role="tool", content=text, tool_call_id=tool_use_id)


def _refuse_toolset(block: dict[str, Any], path: str) -> None:
    if block.get("toolset_name") is not None:
        raise WireError(
            f"{path}.toolset_name is not supported: the gateway runs no MCP toolsets",
            param=f"{path}.toolset_name",
        )


def _parse_assistant_blocks(blocks: list[Any], path: str, found: set[str]) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for k, raw_block in enumerate(blocks):
        block_path = f"{path}[{k}]"
        block = require_object(raw_block, block_path)
        block_type = block.get("type")
        if block_type == "text":
            texts.append(_text(block, block_path, "messages.content", found))
        elif block_type == "tool_use":
            calls.append(_parse_tool_use(block, block_path, found))
        elif block_type == "thinking":
            reject_unknown_keys(block, _THINKING_KEYS, block_path)
            optional_str(block.get("signature"), f"{block_path}.signature")
            _note(block, ("signature",), "messages.content", found)
            thoughts.append(require_str(block.get("thinking"), f"{block_path}.thinking"))
        elif block_type == "redacted_thinking":
            reject_unknown_keys(block, _REDACTED_THINKING_KEYS, block_path)
            require_str(block.get("data"), f"{block_path}.data")
            found.add("messages.content.redacted_thinking")
        else:
            raise _unsupported_block(
                block_type,
                block_path,
                "'text', 'tool_use', 'thinking' or 'redacted_thinking'",
                "in an assistant message",
            )
    return Message(
        role="assistant",
        content="\n".join(texts),
        tool_calls=calls or None,
        reasoning_content="\n".join(thoughts) if thoughts else None,
    )


def _parse_tool_use(block: dict[str, Any], path: str, found: set[str]) -> ToolCall:
    reject_unknown_keys(block, _TOOL_USE_KEYS, path)
    _refuse_toolset(block, path)
    caller = block.get("caller")
    if caller is not None:
        if require_object(caller, f"{path}.caller").get("type") != "direct":
            raise WireError(
                f"{path}.caller: only 'direct' tool calls are supported (the gateway runs no "
                f"code execution), got {caller.get('type')!r}",
                param=f"{path}.caller",
            )
        found.add("messages.content.caller")
    _note(block, ("cache_control",), "messages.content", found)
    return ToolCall(
        id=optional_str(block.get("id"), f"{path}.id"),
        name=require_str(block.get("name"), f"{path}.name"),
        arguments=require_object(block.get("input"), f"{path}.input"),
    )


def _parse_tools(value: Any, ignored: set[str]) -> list[dict[str, Any]] | None:
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
        _check_tool_options(tool, path, ignored)
        if optional_bool(tool.get("defer_loading"), f"{path}.defer_loading"):
            continue  # deferred: not in the prompt until the client loads it
        tools.append({"type": "function", "function": spec})
    return tools or None


def _check_tool_options(tool: dict[str, Any], path: str, ignored: set[str]) -> None:
    optional_bool(tool.get("strict"), f"{path}.strict")
    optional_bool(tool.get("eager_input_streaming"), f"{path}.eager_input_streaming")
    _note(tool, ("cache_control", "strict", "eager_input_streaming"), "tools", ignored)
    callers = tool.get("allowed_callers")
    if callers is not None:
        if "direct" not in require_list(callers, f"{path}.allowed_callers"):
            raise WireError(
                f"{path}.allowed_callers must include 'direct': the gateway runs no code "
                "execution to call the tool from",
                param=f"{path}.allowed_callers",
            )
        ignored.add("tools.allowed_callers")
    examples = tool.get("input_examples")
    if examples is not None:
        if require_list(examples, f"{path}.input_examples"):
            raise WireError(
                f"{path}.input_examples is not supported: the chat template cannot show "
                "examples, so the model would not see them; remove them",
                param=f"{path}.input_examples",
            )
        ignored.add("tools.input_examples")


def _parse_tool_choice(value: Any, ignored: set[str]) -> str:
    if value is None:
        return "auto"
    choice = require_object(value, "tool_choice")
    choice_type = choice.get("type")
    if optional_bool(
        choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use"
    ):
        ignored.add("tool_choice.disable_parallel_tool_use")
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
