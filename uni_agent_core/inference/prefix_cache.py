"""An LRU cache of key/value tensors keyed by token prefixes, with a capacity in tokens.

Agent sessions resend their whole history every turn, so the prompt of turn t+1 starts with the
prompt and output of turn t. Storing the KV of finished sequences and serving the longest
stored prefix of a new prompt turns an O(context) prefill into an O(new tokens) one.

Lookups hash the prompt in blocks of `BLOCK` tokens with chained hashes (each block's key covers
everything before it), find the deepest block that some entry contains, then extend the match
token by token. An entry whose tokens are a prefix of a newly inserted entry is subsumed and
removed, so a growing conversation occupies one entry, not one per turn. All KV must come from
the same weights: the owner clears the cache on every weight update.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

BLOCK = 16

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer `(keys, values)`, each `[1, kv_heads, tokens, head_dim]`."""


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    kv: KV
    block_keys: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class PrefixHit:
    """The result of a lookup: `length` leading prompt tokens whose KV is `kv` (views)."""

    length: int
    kv: KV | None


def _block_keys(tokens: tuple[int, ...] | list[int]) -> list[int]:
    keys = []
    previous = 0
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        previous = hash((previous, tuple(tokens[start : start + BLOCK])))
        keys.append(previous)
    return keys


class PrefixCache:
    """Longest-prefix KV reuse across generate calls (LRU, bounded in tokens)."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._by_block: dict[int, set[int]] = {}
        self._next_id = 0
        self.stored_tokens = 0
        self.lookups = 0
        self.hits = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry (after a weight update the stored KV is stale)."""
        self._entries.clear()
        self._by_block.clear()
        self.stored_tokens = 0

    def lookup(self, tokens: list[int], *, max_length: int) -> PrefixHit:
        """Find the longest cached prefix of `tokens`, capped at `max_length` tokens.

        The caller caps the match below the prompt length so that at least one token is fed
        through the model (its logits give the next token).
        """
        self.lookups += 1
        best_id: int | None = None
        depth = 0
        for key in _block_keys(tokens[:max_length]):
            ids = self._by_block.get(key)
            if not ids:
                break
            best_id = max(ids, key=self._recency)
            depth += 1
        if best_id is None:
            return PrefixHit(0, None)
        entry = self._entries[best_id]
        self._entries.move_to_end(best_id)
        limit = min(len(entry.tokens), max_length)
        length = min(depth * BLOCK, limit)
        if entry.tokens[:length] != tuple(tokens[:length]):  # a hash collision: never reuse
            return PrefixHit(0, None)
        while length < limit and entry.tokens[length] == tokens[length]:
            length += 1
        self.hits += 1
        self.hit_tokens += length
        kv = [(k[:, :, :length], v[:, :, :length]) for k, v in entry.kv]
        return PrefixHit(length, kv)

    def insert(self, tokens: list[int], kv: KV) -> None:
        """Store the KV of `tokens` (`kv` covers exactly `len(tokens)` positions)."""
        if len(tokens) < BLOCK or len(tokens) > self.capacity_tokens:
            return
        stored = tuple(tokens)
        keys = _block_keys(stored)
        for entry_id in set().union(*(self._by_block.get(k, set()) for k in keys)):
            old = self._entries[entry_id]
            if len(old.tokens) <= len(stored) and stored[: len(old.tokens)] == old.tokens:
                self._remove(entry_id)
            elif len(old.tokens) > len(stored) and old.tokens[: len(stored)] == stored:
                self._entries.move_to_end(entry_id)  # already covered by a longer entry
                return
        entry_id = self._next_id
        self._next_id += 1
        self._entries[entry_id] = _Entry(stored, kv, keys)
        for key in keys:
            self._by_block.setdefault(key, set()).add(entry_id)
        self.stored_tokens += len(stored)
        while self.stored_tokens > self.capacity_tokens:
            self._remove(next(iter(self._entries)))

    def _recency(self, entry_id: int) -> int:
        # Entry ids grow with insertion; lookups move entries to the end, so the larger id of
        # two candidates at the same depth is a fine, O(1) tie-break toward newer content.
        return entry_id

    def _remove(self, entry_id: int) -> None:
        entry = self._entries.pop(entry_id)
        for key in entry.block_keys:
            ids = self._by_block.get(key)
            if ids is not None:
                ids.discard(entry_id)
                if not ids:
                    del self._by_block[key]
        self.stored_tokens -= len(entry.tokens)
