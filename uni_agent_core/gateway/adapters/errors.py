"""The error the wire adapters raise for a payload they cannot lower, plus shared checks.

`WireError` carries an HTTP status, a message that names the offending field and the fix, and
the field's path (`param`, e.g. `messages[2].role`). The server catches it and renders the
provider's own error envelope (`openai_error` / `anthropic_error`), so a bad payload never
reaches a session. The small type checks here are shared so the adapters word their errors
alike, and so is the check that every tool result answers an earlier tool call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from uni_agent_core.errors import AgentRLError
from uni_agent_core.gateway.history import HistoryCache, LoweredHistory


class WireError(AgentRLError):
    """A request payload the gateway refuses, with the HTTP status to answer with.

    Attributes:
        status: HTTP status code (400 unless stated otherwise).
        message: Human-readable reason; names the field and, where there is one, the fix.
        param: Path of the offending field (`messages[1].content[0].type`), or None.
    """

    def __init__(self, message: str, *, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def __repr__(self) -> str:
        return f"WireError(status={self.status}, param={self.param!r}, message={self.message!r})"


def type_name(value: Any) -> str:
    """Name a JSON value's type the way a client author thinks of it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def require_object(value: Any, path: str) -> dict[str, Any]:
    """Return `value` if it is a JSON object, else raise a `WireError` naming `path`."""
    if not isinstance(value, dict):
        raise WireError(f"{path} must be an object, got {type_name(value)}", param=path)
    return value


def require_list(value: Any, path: str) -> list[Any]:
    """Return `value` if it is a JSON array, else raise a `WireError` naming `path`."""
    if not isinstance(value, list):
        raise WireError(f"{path} must be an array, got {type_name(value)}", param=path)
    return value


def require_str(value: Any, path: str) -> str:
    """Return `value` if it is a string, else raise a `WireError` naming `path`."""
    if not isinstance(value, str):
        raise WireError(f"{path} must be a string, got {type_name(value)}", param=path)
    return value


def optional_str(value: Any, path: str) -> str | None:
    """Return `value` if it is a string or null, else raise a `WireError` naming `path`."""
    return None if value is None else require_str(value, path)


def optional_bool(value: Any, path: str) -> bool | None:
    """Return `value` if it is a boolean or null, else raise a `WireError` naming `path`."""
    if value is not None and not isinstance(value, bool):
        raise WireError(f"{path} must be a boolean, got {type_name(value)}", param=path)
    return value


def optional_int(value: Any, path: str, *, minimum: int | None = None) -> int | None:
    """Return `value` if it is an integer (at least `minimum`) or null; else raise `WireError`.

    Integral floats such as `256.0` are accepted, since some JSON encoders write them.
    """
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{path} must be an integer, got {type_name(value)}", param=path)
    if minimum is not None and value < minimum:
        raise WireError(f"{path} must be at least {minimum}, got {value}", param=path)
    return value


def optional_number(
    value: Any, path: str, *, minimum: float | None = None, maximum: float | None = None
) -> float | None:
    """Return `value` as a float if it is a number in `[minimum, maximum]` or null.

    Raises:
        WireError: When `value` is not a number or out of range.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{path} must be a number, got {type_name(value)}", param=path)
    if minimum is not None and value < minimum:
        raise WireError(f"{path} must be at least {minimum}, got {value}", param=path)
    if maximum is not None and value > maximum:
        raise WireError(f"{path} must be at most {maximum}, got {value}", param=path)
    return float(value)


def check_top_p(value: Any, path: str) -> float | None:
    """Validate a nucleus mass: a number in (0, 1], or null."""
    top_p = optional_number(value, path, maximum=1.0)
    if top_p is not None and top_p <= 0.0:
        raise WireError(f"{path} must be greater than 0 and at most 1, got {value}", param=path)
    return top_p


def reject_unknown_keys(payload: dict[str, Any], allowed: frozenset[str], path: str) -> None:
    """Raise a `WireError` naming the first key of `payload` outside `allowed`.

    An explicit allowlist is deliberate: an option we silently dropped could change what the
    client believes was sampled, which corrupts training data without a trace.
    """
    for key in payload:
        if key not in allowed:
            where = f"{path}.{key}" if path else key
            raise WireError(
                f"{where} is not supported by the agent-rl gateway; remove it "
                f"(supported keys: {', '.join(sorted(allowed))})",
                param=where,
            )


def decode_arguments(arguments: str) -> dict[str, Any] | str:
    """JSON-decode tool-call arguments when they encode an object, else keep the raw string.

    Clients may re-serialize arguments (key order, whitespace); comparing the parsed object keeps
    such an echo equal to what the model produced.
    """
    try:
        decoded = orjson.loads(arguments)
    except ValueError:
        return arguments
    return decoded if isinstance(decoded, dict) else arguments


CallIds = Callable[[dict[str, Any]], Iterable[str]]
"""The ids of the tool calls a raw message makes (none for non-assistant messages)."""
Answers = Callable[[dict[str, Any], int], Iterable[tuple[str, str, str]]]
"""The tool results in raw message `i`: `(call id, param path, message if it answers none)`."""


def check_tool_results(
    raw_messages: list[Any],
    lowered: LoweredHistory,
    cache: HistoryCache | None,
    calls_of: CallIds,
    answers_of: Answers,
    known: Iterable[str] = (),
) -> None:
    """Refuses a tool result that answers no tool call made before it, as both providers do.

    Only the messages after the part the session's memo vouched for are read; the memo's
    call ids stand for the rest (`HistoryCache.tool_call_ids`). `known` are calls made before
    `raw_messages` (a stored conversation the request continues). Malformed messages are left
    to lowering, which has named their fault already.

    Raises:
        WireError: (400) naming the first orphan result; the memo is dropped, so the next
            request is checked in full.
    """
    start = lowered.raw_known if cache is not None else 0
    called = set(cache.tool_call_ids) if cache is not None and start else set()
    called.update(known)
    try:
        for i in range(start, len(raw_messages)):
            raw = raw_messages[i]
            if type(raw) is not dict:
                continue
            for call_id, param, message in answers_of(raw, i):
                if call_id not in called:
                    raise WireError(message, param=param)
            called.update(calls_of(raw))
    except WireError:
        if cache is not None:
            cache.memo, cache.tool_call_ids = None, frozenset()
        raise
    if cache is not None:
        cache.tool_call_ids = frozenset(called)
