"""Canonical message hashing: what counts as "the same history" when matching chains.

Each message is canonicalised before hashing: tool-call ids and `tool_call_id` are dropped (clients
rename and re-issue them), tool-call arguments are compared as parsed JSON when they parse (so
re-serialised arguments still match); everything else — role, content including whitespace,
name, reasoning text — must be identical. Prefix hashes are chained with a version-tagged
domain separator, so `prefix_hashes(m)[i]` identifies `m[:i]` exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from uni_agent_core.gateway.request import Message

_DOMAIN = b"agent-rl/messages/v1\x00"
EMPTY_PREFIX = hashlib.sha256(_DOMAIN).digest()
HASH_SIZE = len(EMPTY_PREFIX)
"""Bytes of one prefix hash; chains and memos keep theirs concatenated in one blob."""


def _arguments(value: dict[str, Any] | str) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except ValueError:
            return value
    return value


def canonical_message(message: Message) -> bytes:
    """The bytes that identify a message for chain matching.

    A plain message (role and text only, the bulk of any history) is hashed from its raw
    UTF-8 text with no serialisation; anything richer goes through canonical JSON. The leading
    byte keeps the two forms apart.
    """
    if message.tool_calls is None and message.name is None and message.reasoning_content is None:
        return b"p" + message.role.encode() + b"\x00" + message.content.encode()
    record: list[Any] = [message.role, message.content, message.name, message.reasoning_content]
    if message.tool_calls:
        record.append([[call.name, _arguments(call.arguments)] for call in message.tool_calls])
    return b"j" + orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def extend_hash(prefix: bytes, message: Message) -> bytes:
    """The prefix hash of `history + [message]` given the prefix hash of `history`."""
    return hashlib.sha256(prefix + canonical_message(message)).digest()


def split_hashes(blob: bytes) -> list[bytes]:
    """The prefix hashes concatenated in `blob`, one by one."""
    return [blob[i : i + HASH_SIZE] for i in range(0, len(blob), HASH_SIZE)]


def prefix_hashes(messages: Sequence[Message]) -> list[bytes]:
    """`[h(m[:0]), h(m[:1]), ..., h(m)]` — one more entry than messages."""
    hashes = [EMPTY_PREFIX]
    for message in messages:
        hashes.append(extend_hash(hashes[-1], message))
    return hashes


def tools_key(tools: list[dict[str, Any]] | None) -> bytes:
    """Identity of a tool list (exact list equality; None and [] are the same: no tools)."""
    if not tools:
        return b"no-tools"
    return hashlib.sha256(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)).digest()
