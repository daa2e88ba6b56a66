"""Incremental lowering of a request's message history: cost follows the new messages.

Agent harnesses re-send the whole conversation on every turn. Validating, converting
("lowering") and hashing all of it would make each request cost O(context) — about 4 us a
message, 1.7 ms at turn 200 of a tool loop. A session therefore keeps a `HistoryMemo` of the
last request it lowered: a SHA-256 of that request's raw messages (their compact JSON, after
the protocol's head, e.g. Anthropic's `system`) and the prefix hashes of what they lowered to.
A request whose raw messages start with exactly those bytes is lowered only from there on. The
prefix is lowered again only if something reads it: a new chain renders the whole history, and
a continuation of an older chain reads from that chain's depth.

Exactness: lowering raw message `i` depends only on its JSON value and on `i`, so an identical
raw prefix lowers to identical messages and passes validation identically. The memo caches a
pure function; it can only miss, never be wrong (a different key order, or a client that
rewrites history, simply lowers everything again).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import orjson

from uni_agent_core.gateway.hashing import extend_hash, prefix_hashes, split_hashes
from uni_agent_core.gateway.request import Message

LowerMessage = Callable[[Any, int], list[Message]]
"""Lowers raw wire message `i` to zero or more `Message`s (raising `WireError` if invalid)."""


@dataclass(frozen=True, slots=True)
class HistoryMemo:
    """What a session remembers of the last raw history it lowered."""

    protocol: str
    raw_count: int
    digest: bytes
    """SHA-256 over the head and the first `raw_count` raw messages (see `_prefix_hasher`)."""
    lowered_count: int
    hashes: bytes
    """`prefix_hashes` of the `lowered_count` lowered messages (one more entry), concatenated:
    one blob per session instead of a long-lived object per message."""


class HistoryCache:
    """A session's slot for its latest `HistoryMemo` (any request may replace it)."""

    __slots__ = ("memo", "hits", "misses", "tool_call_ids", "ignored_fields")

    def __init__(self) -> None:
        self.memo: HistoryMemo | None = None
        self.hits = 0
        self.misses = 0
        self.tool_call_ids: frozenset[str] = frozenset()
        """The ids of the tool calls in the memo's raw history, kept by the wire adapters so
        a tool result is checked against them without reading the history again."""
        self.ignored_fields: frozenset[str] = frozenset()
        """The ignored fields (`ChatRequest.ignored`) of the memo's raw messages, kept by the
        Anthropic adapter so a request reports them without lowering those messages again."""


class LoweredHistory(Sequence[Message]):
    """The lowered messages of one request, with their prefix hashes.

    The first `known` messages (the part the session's memo vouched for) are lowered only on
    first access; slices after them never touch the prefix.
    """

    __slots__ = ("_load_prefix", "_prefix", "_known", "_tail", "hashes", "raw_known")

    def __init__(
        self,
        tail: list[Message],
        hashes: list[bytes],
        known: int = 0,
        load_prefix: Callable[[], list[Message]] | None = None,
        raw_known: int = 0,
    ) -> None:
        self.raw_known = raw_known
        """How many raw messages the memo vouched for (equal to the last request's)."""
        self._tail = tail
        self._known = known
        self._load_prefix = load_prefix
        self._prefix: list[Message] | None = None if known else []
        self.hashes = hashes

    def __len__(self) -> int:
        return self._known + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1 and start >= self._known:
                return self._tail[start - self._known : stop - self._known]
            return self._all()[index]
        position = index + len(self) if index < 0 else index
        if self._known <= position < len(self):
            return self._tail[position - self._known]
        return self._all()[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LoweredHistory | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LoweredHistory({len(self)} messages, {self._known} from the memo)"

    def release(self) -> None:
        """Drop the messages, their hashes and the raw payload the prefix would be lowered
        from. The session calls this once the request is prepared, so a generation in flight
        does not hold its request's whole history."""
        self._tail, self._prefix, self._load_prefix = [], [], None
        self._known = 0
        self.hashes = []

    def _all(self) -> list[Message]:
        if self._prefix is None:
            assert self._load_prefix is not None
            self._prefix = self._load_prefix()
            if len(self._prefix) != self._known:
                raise RuntimeError("the history prefix lowered differently than remembered")
        return self._prefix + self._tail


def history_hashes(messages: Sequence[Message]) -> list[bytes]:
    """`prefix_hashes(messages)`, free when the adapter already computed them."""
    if isinstance(messages, LoweredHistory):
        return messages.hashes
    return prefix_hashes(messages)


def lower_history(
    protocol: str,
    head_raw: Any,
    head: list[Message],
    raw: list[Any],
    lower: LowerMessage,
    cache: HistoryCache | None,
) -> LoweredHistory:
    """Lower `head + raw` incrementally against the session's memo, and update the memo.

    Args:
        protocol: names the lowering (memos of another protocol never match).
        head_raw: the raw value `head` was lowered from (part of the digest); None if none.
        head: messages before the raw list (Anthropic's system prompt), already lowered.
        raw: the request's raw message list.
        lower: lowers one raw message; it must depend only on the message and its index.
        cache: the session's memo slot; None lowers everything and remembers nothing.
    """
    memo = cache.memo if cache is not None else None
    hasher = None
    if memo is not None and memo.protocol == protocol and 0 < memo.raw_count <= len(raw):
        hasher = _prefix_hasher(head_raw, raw[: memo.raw_count])
        if hasher is None or hasher.digest() != memo.digest:
            hasher = None
    if hasher is None:  # no usable memo: lower everything
        lowered = list(head)
        for i, message in enumerate(raw):
            lowered.extend(lower(message, i))
        history = LoweredHistory(lowered, prefix_hashes(lowered))
        if cache is not None:
            cache.misses += 1
            _remember(cache, protocol, raw, history, _prefix_hasher(head_raw, raw))
        return history

    assert memo is not None and cache is not None
    known_raw, known = memo.raw_count, memo.lowered_count
    tail_raw = len(raw) > known_raw
    tail: list[Message] = []
    for i in range(known_raw, len(raw)):
        tail.extend(lower(raw[i], i))
    hashes = split_hashes(memo.hashes)
    for message in tail:
        hashes.append(extend_hash(hashes[-1], message))

    def load_prefix() -> list[Message]:
        prefix = list(head)
        for i in range(known_raw):
            prefix.extend(lower(raw[i], i))
        return prefix

    history = LoweredHistory(tail, hashes, known, load_prefix, raw_known=known_raw)
    cache.hits += 1
    extended = _extend(hasher, raw[known_raw:]) if tail_raw else hasher
    _remember(cache, protocol, raw, history, extended)
    return history


def _remember(
    cache: HistoryCache,
    protocol: str,
    raw: list[Any],
    history: LoweredHistory,
    hasher: Any | None,
) -> None:
    if hasher is None:
        cache.memo = None
        return
    digests = b"".join(history.hashes)
    cache.memo = HistoryMemo(protocol, len(raw), hasher.digest(), len(history), digests)


def _items(values: list[Any]) -> memoryview:
    """The compact JSON of `values`' items, comma-separated (the list's brackets cut off)."""
    return memoryview(orjson.dumps(values))[1:-1]


def _prefix_hasher(head_raw: Any, raw_prefix: list[Any]) -> Any | None:
    """SHA-256 over the head's JSON, a NUL and the raw messages' JSON (None if unencodable)."""
    try:
        hasher = hashlib.sha256(orjson.dumps(head_raw))
        hasher.update(b"\x00")
        hasher.update(_items(raw_prefix))
    except orjson.JSONEncodeError:  # e.g. nesting deeper than orjson writes
        return None
    return hasher


def _extend(hasher: Any, raw_tail: list[Any]) -> Any | None:
    """The digest state after appending `raw_tail` (equal to hashing it all in one piece)."""
    extended = hasher.copy()
    try:
        extended.update(b",")
        extended.update(_items(raw_tail))
    except orjson.JSONEncodeError:
        return None
    return extended


class ResponseStore:
    """The conversations of a session's stored OpenAI Responses (`previous_response_id`).

    Each entry is the response's whole lowered history after its instructions (the request's
    conversation, then its reply as one assistant message), so a request naming it continues
    exactly that history. Bounded: only the newest `limit` responses are kept (older ids are
    unknown, a 400), and entries share their `Message` objects with one another.
    """

    __slots__ = ("limit", "_entries")

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._entries: OrderedDict[str, tuple[Message, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, response_id: str) -> tuple[Message, ...] | None:
        """The stored conversation of `response_id`, or None if unknown or evicted."""
        return self._entries.get(response_id)

    def put(self, response_id: str, conversation: Sequence[Message]) -> None:
        """Remember a response's conversation, evicting the oldest beyond `limit`."""
        self._entries[response_id] = tuple(conversation)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)
