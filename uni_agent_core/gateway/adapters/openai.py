"""The OpenAI Chat Completions wire adapter, inbound: payload -> `ChatRequest`, and error envelopes.

Pure functions, no server or session state. Requests are checked against an explicit allowlist
of top-level keys: options that are harmless to drop are accepted and ignored (`user`,
`metadata`, `parallel_tool_calls`, `store`, `prompt_cache_key`, `safety_identifier`, and
`logprobs`, `top_logprobs`, `presence_penalty`, `frequency_penalty`, `logit_bias`,
`response_format` at their neutral values), while anything that would change sampling in a way
the gateway cannot honour exactly (penalties, logit bias, structured output, forced tool use,
returned logprobs) or that we do not know is a 400 naming the field. Logprobs are refused rather
than silently omitted: the exact per-token logprobs live in the session's call records
(`GET /sessions/<id>/calls`), not in chat responses. A function tool's `strict` flag is dropped:
constrained decoding cannot be honoured, and parsed arguments are validated as JSON anyway.

Rendering to the wire (responses, stream chunks, SSE framing) lives in `adapters.openai_render`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from uni_agent_core.gateway.adapters.errors import (
    WireError,
    check_tool_results,
    check_top_p,
    decode_arguments,
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
    Role,
    SamplingOverrides,
    ToolCall,
)

MAX_N = 64
"""Most samples per request (mirrors `ChatRequest.n`)."""

_USED_KEYS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "n",
        "stream",
        "stream_options",
    }
)
_IGNORED_KEYS = frozenset(
    {"user", "metadata", "parallel_tool_calls", "store", "prompt_cache_key", "safety_identifier"}
)
# Accepted only at the value that leaves sampling and the response unchanged.
_NEUTRAL_KEYS = frozenset(
    {
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "response_format",
    }
)
_ALLOWED_KEYS = _USED_KEYS | _IGNORED_KEYS | _NEUTRAL_KEYS

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})


def parse_openai_request(payload: Any, history: HistoryCache | None = None) -> ChatRequest:
    """Lower a Chat Completions request body to a `ChatRequest`.

    Per message only `role, content, name, tool_calls, tool_call_id, reasoning_content` are
    kept (other keys such as `refusal` or `audio` are dropped); `developer` becomes `system`;
    `content: null` becomes `""`; a list of text parts is joined with newlines; string tool-call
    arguments are JSON-decoded when they encode an object. `tool_choice: "none"` drops the tools.

    Args:
        payload: The decoded JSON body.
        history: the session's memo of its last history; messages it vouches for are not
            lowered again (see `gateway/history.py`).

    Returns:
        The provider-neutral request.

    Raises:
        WireError: (400) for anything outside the allowlist, a malformed field, or an option that
            would change sampling in a way the gateway cannot honour; the message names the field.
    """
    body = require_object(payload, "request body")
    reject_unknown_keys(body, _ALLOWED_KEYS, "")
    _check_neutral_options(body)
    optional_str(body.get("model"), "model")

    raw_messages = require_list(body.get("messages"), "messages")
    if not raw_messages:
        raise WireError("messages must contain at least one message", param="messages")
    messages = lower_history("openai", None, [], raw_messages, _lower_message, history)
    check_tool_results(raw_messages, messages, history, _tool_calls_made, _tool_results)

    tools = _parse_tools(body.get("tools"))
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and tool_choice != "auto":
        if tool_choice == "none":
            tools = None
        elif tool_choice == "required" or isinstance(tool_choice, dict):
            raise WireError(
                "tool_choice must be 'auto' or 'none': forcing tool use would constrain "
                "sampling, which the gateway cannot do",
                param="tool_choice",
            )
        else:
            raise WireError(
                f"tool_choice must be 'auto' or 'none', got {tool_choice!r}", param="tool_choice"
            )

    n = optional_int(body.get("n"), "n", minimum=1)
    if n is not None and n > MAX_N:
        raise WireError(f"n must be at most {MAX_N}, got {n}", param="n")
    stream = optional_bool(body.get("stream"), "stream") or False
    _parse_stream_options(body.get("stream_options"), stream)

    # Every field is validated above; `model_construct` keeps the lazily lowered history.
    return ChatRequest.model_construct(
        messages=messages,
        tools=tools,
        sampling=_parse_sampling(body),
        n=n or 1,
        stream=stream,
        ignored=tuple(sorted(_IGNORED_KEYS.intersection(body))),
    )


def _tool_calls_made(raw: dict[str, Any]) -> Iterable[str]:
    calls = raw.get("tool_calls") if raw.get("role") == "assistant" else None
    if not isinstance(calls, list):
        return ()
    return [
        call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str)
    ]


def _tool_results(raw: dict[str, Any], i: int) -> Iterable[tuple[str, str, str]]:
    if raw.get("role") != "tool":
        return ()
    call_id, param = raw.get("tool_call_id"), f"messages[{i}].tool_call_id"
    if not isinstance(call_id, str):
        raise WireError(
            f"{param} is required: a message with role 'tool' answers one tool call by its id",
            param=param,
        )
    message = (
        f"{param}: {call_id!r} answers no tool call of an earlier assistant message; messages "
        "with role 'tool' must respond to a preceding message with 'tool_calls'"
    )
    return [(call_id, param, message)]


def openai_include_usage(payload: Any) -> bool:
    """Whether a (validated) request asked for the final usage chunk of a stream.

    `ChatRequest` carries no stream options, so the server asks the payload directly.
    """
    if not isinstance(payload, dict):
        return False
    options = payload.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _check_neutral_options(body: dict[str, Any]) -> None:
    if body.get("logprobs") not in (None, False):
        raise WireError(
            "logprobs must be false or absent: chat responses carry no logprobs; read the exact "
            "token logprobs from GET /sessions/<id>/calls",
            param="logprobs",
        )
    if body.get("top_logprobs") not in (None, 0):
        raise WireError(
            "top_logprobs must be 0 or absent: chat responses carry no logprobs",
            param="top_logprobs",
        )
    for key in ("presence_penalty", "frequency_penalty"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WireError(f"{key} must be a number, got {type_name(value)}", param=key)
        if value != 0:
            raise WireError(
                f"{key} must be 0 or absent, got {value}: penalties would change the sampling "
                "distribution away from the policy being trained",
                param=key,
            )
    if body.get("logit_bias") not in (None, {}):
        raise WireError(
            "logit_bias must be empty or absent: it would change the sampling distribution",
            param="logit_bias",
        )
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise WireError(
            "response_format must be {'type': 'text'} or absent: structured output would "
            "constrain sampling, which the gateway cannot do",
            param="response_format",
        )


def _parse_stream_options(value: Any, stream: bool) -> None:
    if value is None:
        return
    options = require_object(value, "stream_options")
    if not stream:
        raise WireError(
            "stream_options is only allowed when stream is true", param="stream_options"
        )
    reject_unknown_keys(
        options, frozenset({"include_usage", "include_obfuscation"}), "stream_options"
    )
    optional_bool(options.get("include_usage"), "stream_options.include_usage")
    optional_bool(options.get("include_obfuscation"), "stream_options.include_obfuscation")


def _parse_sampling(body: dict[str, Any]) -> SamplingOverrides:
    top_k = optional_int(body.get("top_k"), "top_k")
    if top_k is not None:
        if top_k < -1:
            raise WireError(
                f"top_k must be -1 (disabled) or a positive integer, got {top_k}", param="top_k"
            )
        top_k = -1 if top_k == 0 else top_k  # vLLM reads 0 as "disabled" too
    max_tokens = optional_int(body.get("max_tokens"), "max_tokens", minimum=1)
    max_completion = optional_int(
        body.get("max_completion_tokens"), "max_completion_tokens", minimum=1
    )
    if max_tokens is not None and max_completion is not None and max_tokens != max_completion:
        raise WireError(
            f"max_tokens ({max_tokens}) and max_completion_tokens ({max_completion}) disagree; "
            "send only one",
            param="max_completion_tokens",
        )
    return SamplingOverrides(
        temperature=optional_number(body.get("temperature"), "temperature", minimum=0.0),
        top_p=check_top_p(body.get("top_p"), "top_p"),
        top_k=top_k,
        max_tokens=max_completion if max_completion is not None else max_tokens,
        seed=optional_int(body.get("seed"), "seed"),
        stop=_parse_stop(body.get("stop")),
    )


def _parse_stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else require_list(value, "stop")
    for k, stop in enumerate(stops):
        path = "stop" if isinstance(value, str) else f"stop[{k}]"
        if not require_str(stop, path):
            raise WireError(f"{path} must not be empty", param=path)
    return list(stops)


_PLAIN_KEYS = frozenset({"role", "content"})
_TOOL_RESULT_KEYS = frozenset({"role", "content", "tool_call_id"})


def _lower_message(raw: Any, i: int) -> list[Message]:
    return [_parse_message(raw, i)]


def _parse_message(raw: Any, i: int) -> Message:
    # Fast path for the bulk of any history: `{"role": ..., "content": "text"}` and plain tool
    # results, whose every check of the full path holds trivially.
    if type(raw) is dict and raw.keys() <= _PLAIN_KEYS:
        role_value, content = raw.get("role"), raw.get("content")
        role = _ROLES.get(role_value) if type(role_value) is str else None
        if role is not None and type(content) is str:
            return Message(role=role, content=content)
    if type(raw) is dict and raw.keys() <= _TOOL_RESULT_KEYS and raw.get("role") == "tool":
        content, call_id = raw.get("content"), raw.get("tool_call_id")
        if type(content) is str and type(call_id) is str:
            return Message(role="tool", content=content, tool_call_id=call_id)
    path = f"messages[{i}]"
    message = require_object(raw, path)
    role_value = message.get("role")
    role = _ROLES.get(role_value) if isinstance(role_value, str) else None
    if role is None:
        raise WireError(
            f"{path}.role: unsupported role {role_value!r}; use one of {', '.join(_ROLES)}",
            param=f"{path}.role",
        )
    tool_calls = _parse_tool_calls(message.get("tool_calls"), path)
    if tool_calls and role != "assistant":
        raise WireError(
            f"{path}.tool_calls: only assistant messages may carry tool calls, got role {role!r}",
            param=f"{path}.tool_calls",
        )
    return Message(
        role=role,
        content=_parse_content(message.get("content"), f"{path}.content"),
        name=optional_str(message.get("name"), f"{path}.name"),
        tool_calls=tool_calls,
        tool_call_id=optional_str(message.get("tool_call_id"), f"{path}.tool_call_id"),
        reasoning_content=optional_str(
            message.get("reasoning_content"), f"{path}.reasoning_content"
        ),
    )


def _parse_content(content: Any, path: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(
            f"{path} must be a string, null or an array of content parts, got {type_name(content)}",
            param=path,
        )
    parts = content
    texts: list[str] = []
    for k, raw_part in enumerate(parts):
        part_path = f"{path}[{k}]"
        part = require_object(raw_part, part_path)
        part_type = part.get("type")
        if part_type == "text":
            texts.append(require_str(part.get("text"), f"{part_path}.text"))
        elif part_type in _IMAGE_PARTS:
            raise WireError(
                f"{part_path}: images are not supported; send text only", param=part_path
            )
        else:
            raise WireError(
                f"{part_path}.type: unsupported content part {part_type!r}; only 'text' parts "
                "are supported",
                param=f"{part_path}.type",
            )
    return "\n".join(texts)


def _parse_tool_calls(value: Any, message_path: str) -> list[ToolCall] | None:
    if value is None:
        return None
    path = f"{message_path}.tool_calls"
    calls: list[ToolCall] = []
    for j, raw_call in enumerate(require_list(value, path)):
        call_path = f"{path}[{j}]"
        call = require_object(raw_call, call_path)
        call_type = call.get("type", "function")
        if call_type != "function":
            raise WireError(
                f"{call_path}.type must be 'function', got {call_type!r}",
                param=f"{call_path}.type",
            )
        function = require_object(call.get("function"), f"{call_path}.function")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            parsed: dict[str, Any] | str = decode_arguments(arguments)
            if not isinstance(parsed, dict):
                # Our replies only ever carry object arguments, so this is not an echo of
                # ours: the model would be trained against a history it never produced.
                raise WireError(
                    f"{call_path}.function.arguments must encode a JSON object, got "
                    f"{arguments[:60]!r}",
                    param=f"{call_path}.function.arguments",
                )
        elif isinstance(arguments, dict):
            parsed = arguments
        else:
            raise WireError(
                f"{call_path}.function.arguments must be a JSON string, got {type_name(arguments)}",
                param=f"{call_path}.function.arguments",
            )
        calls.append(
            ToolCall(
                id=optional_str(call.get("id"), f"{call_path}.id"),
                name=require_str(function.get("name"), f"{call_path}.function.name"),
                arguments=parsed,
            )
        )
    return calls or None


def _parse_tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    tools: list[dict[str, Any]] = []
    for k, raw_tool in enumerate(require_list(value, "tools")):
        path = f"tools[{k}]"
        tool = require_object(raw_tool, path)
        if tool.get("type") != "function":
            raise WireError(
                f"{path}.type must be 'function', got {tool.get('type')!r}", param=f"{path}.type"
            )
        reject_unknown_keys(tool, frozenset({"type", "function"}), path)
        function = require_object(tool.get("function"), f"{path}.function")
        reject_unknown_keys(
            function, frozenset({"name", "description", "parameters", "strict"}), f"{path}.function"
        )
        name = require_str(function.get("name"), f"{path}.function.name")
        if not name:
            raise WireError(
                f"{path}.function.name must not be empty", param=f"{path}.function.name"
            )
        optional_bool(function.get("strict"), f"{path}.function.strict")
        spec: dict[str, Any] = {"name": name}
        description = optional_str(function.get("description"), f"{path}.function.description")
        if description is not None:
            spec["description"] = description
        if function.get("parameters") is not None:
            spec["parameters"] = require_object(
                function["parameters"], f"{path}.function.parameters"
            )
        tools.append({"type": "function", "function": spec})
    return tools or None


def openai_error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    type_: str | None = None,
    code: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """An OpenAI error envelope `{"error": {message, type, param, code}}` with its status.

    The type follows the OpenAI API: `invalid_request_error` for 4xx (401 included, with code
    `invalid_api_key` unless another is given) and `server_error` for 5xx.

    Args:
        status: HTTP status code.
        message: Human-readable reason.
        param: The offending request field, if any.
        type_: Error type; derived from `status` when None.
        code: Machine-readable code; None unless known.

    Returns:
        `(status, body)`.
    """
    if type_ is None:
        type_ = "server_error" if status >= 500 else "invalid_request_error"
    if code is None and status == 401:
        code = "invalid_api_key"
    return status, {"error": {"message": message, "type": type_, "param": param, "code": code}}


def openai_wire_error(error: WireError) -> tuple[int, dict[str, Any]]:
    """The OpenAI envelope for a `WireError` raised while parsing a request."""
    return openai_error(error.status, error.message, param=error.param)
