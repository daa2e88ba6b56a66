"""The OpenAI Responses wire adapter, inbound: payload -> `ChatRequest` and the tool names.

Pure functions, no server or session state. A Responses request lowers to the same OpenAI-shaped
messages as the Chat Completions adapter, so the two yield identical tokens for one
conversation:

- `instructions` is the first system message; `input` is a string (one user message) or a list
  of items: `message` items and role-only items (EasyInputMessage) with roles `user`,
  `assistant`, `system`, `developer` (-> `system`) and text parts (`input_text`,
  `output_text`, joined with newlines); `function_call` and `custom_tool_call` items become
  tool calls of the assistant message before them (a call with none before it opens one, with
  empty text), so an assistant message and its calls are one turn, as the gateway renders
  them; `function_call_output` / `custom_tool_call_output` items become `tool` messages;
  `reasoning` items are dropped and counted (`input.reasoning`): the gateway never emits them,
  and any reasoning the model writes stays in its text, so dropping is what keeps an echoed
  turn identical to what was sampled. An assistant item's `phase` is dropped and counted.
- Tools are flattened to the function tools the chat template renders. A `function` tool keeps
  its name; a `custom` (freeform) tool becomes a function with one string parameter `input`
  (its grammar, if any, is shown in that parameter's description, not enforced), and the
  model's call is rendered back as a `custom_tool_call` whose `input` is that string, which
  lowers to the same call again; a `namespace`'s tools are named `<namespace>__<name>` and
  their calls rendered with `name` and `namespace` apart, as Codex routes them
  (`ToolName::new(namespace, name)`). Hosted tools (`web_search`, `file_search`,
  `code_interpreter`, `image_generation`) cannot run here: dropped and counted
  (`tools.<type>`). `WireTool` records how the client names each flat tool.
- `previous_response_id` continues the conversation of a stored response of the session
  (`history.ResponseStore`; an unknown id is a 400 naming the field); the earlier response's
  instructions are not carried over, as in the OpenAI API.

Top-level keys are checked against an allowlist: those that cannot change the sampled tokens
are accepted and counted as ignored (`include`, `store` (which only decides whether the reply
is kept for `previous_response_id`), `prompt_cache_key`, `prompt_cache_retention`,
`client_metadata`, `metadata`, `user`, `safety_identifier`, `service_tier`,
`parallel_tool_calls`, `reasoning` (the engine has no effort knob), `truncation` (`disabled`
only: `auto` would have the server drop history), `text` (plain text format and `verbosity`),
`stream_options`); forcing tool use, structured output, `background: true`, returned logprobs,
images and files, and anything unknown are a 400 naming the field.

Rendering a `ChatChoice` as a Response and its stream events lives in
`adapters.responses_render`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
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
from uni_agent_core.gateway.history import HistoryCache, ResponseStore, lower_history
from uni_agent_core.gateway.request import ChatRequest, Message, Role, SamplingOverrides, ToolCall

CUSTOM_INPUT = "input"
"""The one string parameter a custom (freeform) tool is given as a function tool."""
NAMESPACE_SEPARATOR = "__"
"""Between a namespace and a tool's name in the flat name the model sees."""

_USED_KEYS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "max_output_tokens",
        "stream",
        "previous_response_id",
    }
)
_IGNORED_KEYS = frozenset(
    {
        "include",
        "store",
        "prompt_cache_key",
        "prompt_cache_retention",
        "client_metadata",
        "metadata",
        "user",
        "safety_identifier",
        "service_tier",
        "parallel_tool_calls",
        "reasoning",
        "truncation",
        "text",
        "stream_options",
    }
)
# Accepted only at the value that leaves sampling and the response unchanged.
_NEUTRAL_KEYS = frozenset({"background", "top_logprobs"})
_ALLOWED_KEYS = _USED_KEYS | _IGNORED_KEYS | _NEUTRAL_KEYS

_ROLES: dict[str, Role] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MEDIA_PARTS = {
    "input_image": "images",
    "input_file": "files",
    "input_audio": "audio",
}
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
_JOINING_ITEMS = _CALL_ITEMS | {"reasoning"}
"""Items that belong to the turn before them (an assistant turn's calls and reasoning)."""
_HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
    }
)
_FUNCTION_TOOL_KEYS = frozenset({"type", "name", "description", "parameters", "strict"})
_CUSTOM_TOOL_KEYS = frozenset({"type", "name", "description", "format"})
_NAMESPACE_KEYS = frozenset({"type", "name", "description", "tools"})


@dataclass(frozen=True, slots=True)
class WireTool:
    """How the client names a tool that the model sees as one flat function."""

    name: str
    namespace: str | None = None
    custom: bool = False
    """A freeform tool: its calls are `custom_tool_call` items carrying `CUSTOM_INPUT`."""


@dataclass(slots=True)
class ResponsesRequest:
    """A lowered Responses request: the chat request plus what rendering and storing need."""

    chat: ChatRequest
    tools: dict[str, WireTool] = field(default_factory=dict)
    """Flat function name -> the client's name for it (every tool of the request)."""
    store: bool = True
    conversation: list[Message] | None = None
    """When `store`: the lowered history after the instructions, to keep with the reply."""
    previous_response_id: str | None = None


def flat_tool_name(name: str, namespace: str | None) -> str:
    """The function name the model sees for a (possibly namespaced) tool."""
    return name if namespace is None else f"{namespace}{NAMESPACE_SEPARATOR}{name}"


def parse_responses_request(
    payload: Any,
    history: HistoryCache | None = None,
    stored: ResponseStore | None = None,
) -> ResponsesRequest:
    """Lower a Responses API request body (see the module docstring for the rules).

    Args:
        payload: The decoded JSON body.
        history: the session's memo of its last history; items it vouches for are not lowered
            again (see `gateway/history.py`). Not used with `previous_response_id`.
        stored: the session's stored responses, for `previous_response_id`.

    Raises:
        WireError: (400) for anything outside the allowlist, a malformed field, an unknown
            `previous_response_id`, or an option that would change sampling in a way the
            gateway cannot honour; the message names the field.
    """
    body = require_object(payload, "request body")
    reject_unknown_keys(body, _ALLOWED_KEYS, "")
    _check_options(body)
    optional_str(body.get("model"), "model")
    ignored = set(_IGNORED_KEYS.intersection(body))

    instructions = optional_str(body.get("instructions"), "instructions")
    head = [Message(role="system", content=instructions)] if instructions else []
    previous_id = optional_str(body.get("previous_response_id"), "previous_response_id")
    earlier: tuple[Message, ...] = ()
    if previous_id is not None:
        found = stored.get(previous_id) if stored is not None else None
        if found is None:
            raise WireError(
                f"Previous response with id '{previous_id}' not found (this gateway keeps the "
                "newest responses of a session that were created with store true)",
                param="previous_response_id",
            )
        earlier, history = found, None  # a new head every turn: the memo cannot match

    raw_input = body.get("input")
    if isinstance(raw_input, str):
        units = [{"at": 0, "items": [{"role": "user", "content": raw_input}]}]
    else:
        units = _units(require_list(raw_input, "input"), ignored)
    if not units and not earlier:
        raise WireError("input must contain at least one item", param="input")
    messages = lower_history(
        "responses", instructions, head + list(earlier), units, _lower_unit, history
    )
    known = [call.id for m in earlier for call in m.tool_calls or () if call.id is not None]
    check_tool_results(units, messages, history, _calls_made, _tool_results, known)

    tools, names = _parse_tools(body.get("tools"), ignored)
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

    store = optional_bool(body.get("store"), "store")
    store = True if store is None else store
    conversation = list(messages)[len(head) :] if store else None
    chat = ChatRequest.model_construct(
        messages=messages,
        tools=tools,
        sampling=SamplingOverrides(
            temperature=optional_number(body.get("temperature"), "temperature", minimum=0.0),
            top_p=check_top_p(body.get("top_p"), "top_p"),
            max_tokens=optional_int(body.get("max_output_tokens"), "max_output_tokens", minimum=1),
        ),
        n=1,
        stream=optional_bool(body.get("stream"), "stream") or False,
        ignored=tuple(sorted(ignored)),
    )
    return ResponsesRequest(
        chat=chat,
        tools=names,
        store=store,
        conversation=conversation,
        previous_response_id=previous_id,
    )


def _check_options(body: dict[str, Any]) -> None:
    if body.get("background") not in (None, False):
        raise WireError(
            "background must be false or absent: the gateway answers while the request is open",
            param="background",
        )
    if body.get("top_logprobs") not in (None, 0):
        raise WireError(
            "top_logprobs must be 0 or absent: responses carry no logprobs; read the exact token "
            "logprobs from GET /sessions/<id>/calls",
            param="top_logprobs",
        )
    truncation = body.get("truncation")
    if truncation not in (None, "disabled"):
        raise WireError(
            f"truncation must be 'disabled' or absent, got {truncation!r}: the gateway never "
            "drops history to fit the context (the trajectory would no longer be the prompt)",
            param="truncation",
        )
    text = body.get("text")
    if text is not None:
        text = require_object(text, "text")
        reject_unknown_keys(text, frozenset({"format", "verbosity"}), "text")
        text_format = text.get("format")
        if text_format is not None and text_format != {"type": "text"}:
            raise WireError(
                "text.format must be {'type': 'text'} or absent: structured output would "
                "constrain sampling, which the gateway cannot do",
                param="text.format",
            )
        optional_str(text.get("verbosity"), "text.verbosity")
    for key in ("reasoning", "metadata", "client_metadata", "stream_options"):
        if body.get(key) is not None:
            require_object(body[key], key)
    if body.get("include") is not None:
        for k, entry in enumerate(require_list(body["include"], "include")):
            require_str(entry, f"include[{k}]")
    optional_bool(body.get("parallel_tool_calls"), "parallel_tool_calls")
    for key in ("prompt_cache_key", "prompt_cache_retention", "user", "safety_identifier"):
        optional_str(body.get(key), key)
    optional_str(body.get("service_tier"), "service_tier")


def _units(items: list[Any], ignored: set[str]) -> list[dict[str, Any]]:
    """Group input items into turns: `{"at": index of the first item, "items": [...]}`.

    An item that is a call or reasoning joins the turn before it, so each unit lowers on its
    own (the history memo hashes and lowers whole units).
    """
    units: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        kind = item.get("type") if type(item) is dict else None
        if kind == "reasoning":
            ignored.add("input.reasoning")
        elif type(item) is dict and "phase" in item:
            ignored.add("input.phase")
        if units and kind in _JOINING_ITEMS:
            units[-1]["items"].append(item)
        else:
            units.append({"at": i, "items": [item]})
    return units


def _lower_unit(unit: Any, _: int) -> list[Message]:
    start = unit["at"]
    lowered: list[Message] = []
    turn: tuple[str, list[ToolCall]] | None = None  # assistant text and calls being built

    def flush() -> None:
        nonlocal turn
        if turn is not None:
            content, calls = turn
            lowered.append(Message(role="assistant", content=content, tool_calls=calls or None))
            turn = None

    for k, raw in enumerate(unit["items"]):
        path = f"input[{start + k}]"
        item = require_object(raw, path)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"  # EasyInputMessage
        if kind == "message":
            role, content = _parse_message(item, path)
            flush()
            if role == "assistant":
                turn = (content, [])
            else:
                lowered.append(Message(role=role, content=content))
        elif kind in _CALL_ITEMS:
            if turn is None:
                turn = ("", [])
            turn[1].append(_parse_call(item, path, kind))
        elif kind in _OUTPUT_ITEMS:
            flush()
            lowered.append(
                Message(
                    role="tool",
                    content=_output_text(item.get("output"), f"{path}.output"),
                    tool_call_id=require_str(item.get("call_id"), f"{path}.call_id"),
                )
            )
        elif kind == "reasoning":
            continue  # dropped (module docstring); the turn it precedes is unchanged
        else:
            raise WireError(
                f"{path}.type: unsupported input item {kind!r}; use 'message', 'function_call', "
                "'function_call_output', 'custom_tool_call', 'custom_tool_call_output' or "
                "'reasoning'",
                param=f"{path}.type",
            )
    flush()
    return lowered


def _parse_message(item: dict[str, Any], path: str) -> tuple[Role, str]:
    role_value = item.get("role")
    role = _ROLES.get(role_value) if isinstance(role_value, str) else None
    if role is None:
        raise WireError(
            f"{path}.role: unsupported role {role_value!r}; use one of {', '.join(_ROLES)}",
            param=f"{path}.role",
        )
    return role, _content_text(item.get("content"), f"{path}.content")


def _content_text(content: Any, path: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(
            f"{path} must be a string or an array of content parts, got {type_name(content)}",
            param=path,
        )
    texts: list[str] = []
    for k, raw_part in enumerate(content):
        part_path = f"{path}[{k}]"
        part = require_object(raw_part, part_path)
        part_type = part.get("type")
        if part_type in _TEXT_PARTS:
            texts.append(require_str(part.get("text"), f"{part_path}.text"))
        elif part_type in _MEDIA_PARTS:
            raise WireError(
                f"{part_path}: {_MEDIA_PARTS[part_type]} are not supported; send text only",
                param=part_path,
            )
        else:
            raise WireError(
                f"{part_path}.type: unsupported content part {part_type!r}; only 'input_text' and "
                "'output_text' parts are supported",
                param=f"{part_path}.type",
            )
    return "\n".join(texts)


def _output_text(output: Any, path: str) -> str:
    if output is None:
        raise WireError(f"{path} is required", param=path)
    return _content_text(output, path)


def _parse_call(item: dict[str, Any], path: str, kind: str) -> ToolCall:
    call_id = require_str(item.get("call_id"), f"{path}.call_id")
    name = require_str(item.get("name"), f"{path}.name")
    flat = flat_tool_name(name, optional_str(item.get("namespace"), f"{path}.namespace"))
    if kind == "custom_tool_call":
        text = require_str(item.get("input"), f"{path}.input")
        return ToolCall(id=call_id, name=flat, arguments={CUSTOM_INPUT: text})
    arguments = require_str(item.get("arguments"), f"{path}.arguments")
    parsed = decode_arguments(arguments)
    if not isinstance(parsed, dict):
        # Our replies only ever carry object arguments, so this is not an echo of ours: the
        # model would be trained against a history it never produced.
        raise WireError(
            f"{path}.arguments must encode a JSON object, got {arguments[:60]!r}",
            param=f"{path}.arguments",
        )
    return ToolCall(id=call_id, name=flat, arguments=parsed)


def _calls_made(unit: Any) -> Iterable[str]:
    return [
        item["call_id"]
        for item in unit["items"]
        if type(item) is dict
        and item.get("type") in _CALL_ITEMS
        and isinstance(item.get("call_id"), str)
    ]


def _tool_results(unit: Any, _: int) -> Iterable[tuple[str, str, str]]:
    results = []
    for k, item in enumerate(unit["items"]):
        if type(item) is not dict or item.get("type") not in _OUTPUT_ITEMS:
            continue
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            continue  # lowering has named this fault already
        param = f"input[{unit['at'] + k}].call_id"
        message = (
            f"{param}: no tool call found for {item['type']} with call_id {call_id!r}; an output "
            "must answer a function_call or custom_tool_call earlier in the conversation"
        )
        results.append((call_id, param, message))
    return results


def _parse_tools(
    value: Any, ignored: set[str]
) -> tuple[list[dict[str, Any]] | None, dict[str, WireTool]]:
    if value is None:
        return None, {}
    tools: list[dict[str, Any]] = []
    names: dict[str, WireTool] = {}

    def add(tool: dict[str, Any], path: str, namespace: str | None) -> None:
        kind = tool.get("type")
        if kind == "function":
            reject_unknown_keys(tool, _FUNCTION_TOOL_KEYS, path)
            optional_bool(tool.get("strict"), f"{path}.strict")
            parameters = tool.get("parameters")
            if parameters is not None:
                parameters = require_object(parameters, f"{path}.parameters")
            wire = WireTool(_tool_name(tool, path), namespace)
        elif kind == "custom":
            reject_unknown_keys(tool, _CUSTOM_TOOL_KEYS, path)
            parameters = _custom_parameters(tool.get("format"), f"{path}.format")
            wire = WireTool(_tool_name(tool, path), namespace, custom=True)
        else:
            raise WireError(
                f"{path}.type: a namespace holds 'function' and 'custom' tools, got {kind!r}",
                param=f"{path}.type",
            )
        flat = flat_tool_name(wire.name, namespace)
        if flat in names:
            raise WireError(
                f"{path}.name: a second tool is named {flat!r} (the model sees namespaced tools "
                f"as '<namespace>{NAMESPACE_SEPARATOR}<name>')",
                param=f"{path}.name",
            )
        names[flat] = wire
        spec: dict[str, Any] = {"name": flat}
        description = optional_str(tool.get("description"), f"{path}.description")
        if description is not None:
            spec["description"] = description
        if parameters is not None:
            spec["parameters"] = parameters
        tools.append({"type": "function", "function": spec})

    for k, raw_tool in enumerate(require_list(value, "tools")):
        path = f"tools[{k}]"
        tool = require_object(raw_tool, path)
        kind = tool.get("type")
        if kind in ("function", "custom"):
            add(tool, path, None)
        elif kind == "namespace":
            reject_unknown_keys(tool, _NAMESPACE_KEYS, path)
            namespace = _tool_name(tool, path)
            optional_str(tool.get("description"), f"{path}.description")
            for j, inner in enumerate(require_list(tool.get("tools"), f"{path}.tools")):
                add(require_object(inner, f"{path}.tools[{j}]"), f"{path}.tools[{j}]", namespace)
        elif kind in _HOSTED_TOOLS:
            ignored.add(f"tools.{kind}")
        else:
            raise WireError(
                f"{path}.type: unsupported tool type {kind!r}; use 'function', 'custom' or "
                f"'namespace' (hosted tools such as web_search are dropped: nothing runs them "
                "here)",
                param=f"{path}.type",
            )
    return tools or None, names


def _tool_name(tool: dict[str, Any], path: str) -> str:
    name = require_str(tool.get("name"), f"{path}.name")
    if not name:
        raise WireError(f"{path}.name must not be empty", param=f"{path}.name")
    return name


def _custom_parameters(value: Any, path: str) -> dict[str, Any]:
    """The one-string-parameter schema a custom tool is shown to the model with."""
    described = "The tool's input, as free-form text."
    if value is not None:
        fmt = require_object(value, path)
        kind = fmt.get("type")
        if kind == "grammar":
            reject_unknown_keys(fmt, frozenset({"type", "syntax", "definition"}), path)
            syntax = require_str(fmt.get("syntax"), f"{path}.syntax")
            definition = require_str(fmt.get("definition"), f"{path}.definition")
            described = f"The tool's input, in this {syntax} grammar:\n{definition}"
        elif kind == "text":
            reject_unknown_keys(fmt, frozenset({"type"}), path)
        else:
            raise WireError(
                f"{path}.type must be 'text' or 'grammar', got {kind!r}", param=f"{path}.type"
            )
    return {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": described}},
        "required": [CUSTOM_INPUT],
        "additionalProperties": False,
    }


def remember_response(
    stored: ResponseStore, response_id: str, request: ResponsesRequest, reply: Message
) -> None:
    """Keep a stored request's conversation and its reply under the response's id."""
    if request.store and request.conversation is not None:
        stored.put(response_id, [*request.conversation, reply])
