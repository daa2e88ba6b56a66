"""The router's approximate model of one replica's prefix (KV) cache: a radix tree over token ids.

`PrefixTree` owns which prompt prefixes a router believes are resident on an inference replica
(SGLang-router style) and the LRU eviction model that keeps that belief within the replica's
token capacity. Edges are compressed runs of tokens, split where sequences diverge. An edge is
the machine bytes of its token ids (4 bytes a token; 8 with `id_bytes=8`, for ids beyond int32
such as block hashes), so a resident token costs its id's bytes rather than a Python int, and
matching is a `memcmp` of whole edges, bisected only where two runs diverge. An `array` of the
same item type (the gateway's int32 prompts) is read with one `memcpy`; other sequences are
converted id by id.

Semantics, token by token (the tree is an exact, compressed form of this):

- The resident set is a prefix-closed set of token sequences; its size is the number of
  non-empty resident prefixes (the sum of edge lengths).
- A logical clock increases by one on every `insert` and every `match(touch=True)` call; every
  prefix of the touched path gets that clock (edges are split where a touched path ends
  mid-edge, so the untouched tail keeps its older clock).
- Eviction repeatedly removes, from the resident prefixes that have no resident one-token
  extension (leaves) and are not pinned, the one with the smallest clock; ties, which only
  prefixes touched in the same call could have, go to the longest prefix first. On a compressed
  edge this trims tokens from the end of the least recently used leaf edge, whole or in part.
- `insert` evicts down to the capacity afterwards but never evicts the path it just inserted;
  pinned prefixes (reference-counted by `pin`/`unpin`) are never evicted, so the size may stay
  above the capacity. Eviction happens only in `insert`, `evict` and `set_capacity`, never in
  `unpin`.
"""

from __future__ import annotations

import heapq
import itertools
from array import array
from collections.abc import Iterator, Sequence

_TYPECODES = {4: "i", 8: "q"}
"""`array` item type of a token id, by its width in bytes."""


class _Node:
    """One compressed edge of the tree: a run of tokens and the state shared by all of them."""

    __slots__ = ("edge", "children", "parent", "clock", "pins", "end")

    def __init__(self, edge: bytes, parent: _Node | None, clock: int, pins: int, end: int) -> None:
        self.edge = edge
        """The run's token ids as machine bytes."""
        self.children: dict[bytes, _Node] = {}
        """Child edges by the bytes of their first token."""
        self.parent = parent
        self.clock = clock
        self.pins = pins
        self.end = end
        """Length of the full prefix ending with this edge's last token."""


def _check_capacity(capacity_tokens: int | None) -> None:
    if capacity_tokens is not None and capacity_tokens < 0:
        raise ValueError(f"capacity_tokens must be >= 0 or None, got {capacity_tokens}")


def as_int32(tokens: Sequence[int]) -> array:
    """`tokens` as an int32 `array`, which a tree of token ids reads with one `memcpy` instead
    of converting id by id (the same object when it already is one).

    Raises:
        OverflowError: an id does not fit int32.
    """
    if isinstance(tokens, array) and tokens.typecode == "i":
        return tokens
    return array("i", tokens)


def _common_len(edge: bytes, tokens: bytes, start: int, width: int) -> int:
    """Bytes of the longest common prefix of `edge` and `tokens[start:]`, in whole tokens of
    `width` bytes."""
    n = min(len(edge), len(tokens) - start)
    view = memoryview(edge)
    if tokens.startswith(view[:n], start):
        return n
    low, high = 0, n  # edge[:low] matches there, edge[:high] does not
    while high - low > width:
        middle = low + (high - low) // (2 * width) * width
        if tokens.startswith(view[low:middle], start + low):
            low = middle
        else:
            high = middle
    return low


class PrefixTree:
    """Approximate radix tree of the token prefixes resident in one replica's prefix cache.

    See the module docstring for the exact clock, eviction and pinning semantics.
    """

    def __init__(self, capacity_tokens: int | None = None, *, id_bytes: int = 4) -> None:
        """Create an empty tree holding at most `capacity_tokens` tokens (None: unbounded), of
        ids that fit `id_bytes` signed bytes (4: token ids; 8: e.g. 64-bit hashes)."""
        _check_capacity(capacity_tokens)
        if id_bytes not in _TYPECODES:
            raise ValueError(f"id_bytes must be 4 or 8, got {id_bytes}")
        self._width = id_bytes
        self._typecode = _TYPECODES[id_bytes]
        self._capacity = capacity_tokens
        self._serial = itertools.count()
        self.clear()

    @property
    def capacity_tokens(self) -> int | None:
        """The token capacity evictions keep to (None: unbounded)."""
        return self._capacity

    @property
    def size(self) -> int:
        """Resident tokens: the sum of all edge lengths."""
        return self._size

    def clear(self) -> None:
        """Forget everything: resident tokens, clocks and pins."""
        self._root = _Node(b"", None, 0, 0, 0)
        self._size = 0
        self._nodes = 0
        self._clock = 0
        self._heap: list[tuple[int, int, int, _Node]] = []

    # ---------------------------------------------------------------- queries and updates

    def match(self, tokens: Sequence[int], *, touch: bool = True) -> int:
        """Length of the longest resident prefix of `tokens`.

        With `touch`, the clock advances and the matched path becomes the most recently used.
        """
        path, matched, k = self._walk(self._encode(tokens))
        if touch:
            self._clock += 1
            if path:
                if k < len(path[-1].edge):
                    path[-1] = self._split(path[-1], k)
                self._touch(path)
        return matched // self._width

    def insert(self, tokens: Sequence[int]) -> int:
        """Make `tokens` resident as the most recently used path; returns the tokens added.

        Afterwards evicts least recently used leaves down to the capacity, never touching the
        path just inserted nor pinned paths.
        """
        t = self._encode(tokens)
        width = self._width
        self._clock += 1
        path, matched, k = self._walk(t)
        if path and k < len(path[-1].edge):
            path[-1] = self._split(path[-1], k)
        added = (len(t) - matched) // width
        if added:
            parent = path[-1] if path else self._root
            leaf = _Node(t[matched:], parent, self._clock, 0, len(t) // width)
            parent.children[t[matched : matched + width]] = leaf
            self._nodes += 1
            self._size += added
            path.append(leaf)
        if path:
            self._touch(path)
        if self._capacity is not None and self._size > self._capacity:
            self._evict(self._size - self._capacity, protect_clock=self._clock)
        return added

    def evict(self, n_tokens: int) -> int:
        """Free `n_tokens` (fewer if only pinned ones remain), LRU leaf first; returns freed."""
        return self._evict(n_tokens, protect_clock=None)

    def set_capacity(self, capacity_tokens: int | None) -> int:
        """Hold at most `capacity_tokens` tokens from now on (None: unbounded), evicting down to
        it at once (pinned paths stay); returns the tokens freed."""
        _check_capacity(capacity_tokens)
        self._capacity = capacity_tokens
        if capacity_tokens is None or self._size <= capacity_tokens:
            return 0
        return self._evict(self._size - capacity_tokens, protect_clock=None)

    def pin(self, tokens: Sequence[int]) -> None:
        """Count one more in-flight user of the path `tokens`, protecting it from eviction.

        Raises:
            ValueError: `tokens` is not entirely resident (insert it first).
        """
        t = self._encode(tokens)
        path, matched, k = self._walk(t)
        if matched < len(t):
            width = self._width
            raise ValueError(
                f"cannot pin: only {matched // width} of {len(t) // width} tokens are resident"
            )
        if path and k < len(path[-1].edge):
            path[-1] = self._split(path[-1], k)
        for node in path:
            node.pins += 1

    def unpin(self, tokens: Sequence[int]) -> None:
        """Release one `pin` of the path `tokens`; the tree is unchanged if this raises.

        Raises:
            ValueError: some prefix of `tokens` is not resident or not pinned.
        """
        t = self._encode(tokens)
        path, matched, k = self._walk(t)
        if matched < len(t) or any(node.pins <= 0 for node in path):
            raise ValueError(
                f"cannot unpin a path that is not pinned ({len(t) // self._width} tokens)"
            )
        if path and k < len(path[-1].edge):
            path[-1] = self._split(path[-1], k)
        for node in path:
            node.pins -= 1
        if path:
            last = path[-1]
            if last.pins == 0 and not last.children:
                self._push(last)

    def paths(self) -> Iterator[tuple[int, ...]]:
        """Yield the token sequence of every leaf (each resident prefix is a prefix of one)."""
        stack: list[tuple[_Node, bytes]] = [(self._root, b"")]
        while stack:
            node, prefix = stack.pop()
            prefix += node.edge
            if not node.children:
                if prefix:
                    ids = array(self._typecode)
                    ids.frombytes(prefix)
                    yield tuple(ids)
                continue
            stack.extend((child, prefix) for child in node.children.values())

    # ---------------------------------------------------------------- internals

    def _encode(self, tokens: Sequence[int]) -> bytes:
        """The token ids as the machine bytes edges are made of."""
        if isinstance(tokens, array) and tokens.typecode == self._typecode:
            return tokens.tobytes()
        return array(self._typecode, tokens).tobytes()

    def _walk(self, t: bytes) -> tuple[list[_Node], int, int]:
        """Nodes along the longest resident prefix of `t`, its length, and how much of the last
        node's edge it covers (the whole edge unless the match ends mid-edge); lengths in
        bytes."""
        node = self._root
        path: list[_Node] = []
        pos = 0
        n = len(t)
        k = 0
        children = node.children
        width = self._width
        while pos < n:
            child = children.get(t[pos : pos + width])
            if child is None:
                break
            edge = child.edge
            k = _common_len(edge, t, pos, width)
            path.append(child)
            pos += k
            if k < len(edge):
                break
            children = child.children
        return path, pos, k

    def _split(self, node: _Node, k: int) -> _Node:
        """Split `node` after the first `k` bytes of its edge; returns the new upper node.

        The original node object keeps the tail (so its heap entries stay valid).
        """
        parent = node.parent
        assert parent is not None
        width = self._width
        head = node.edge[:k]
        tail_tokens = (len(node.edge) - k) // width
        upper = _Node(head, parent, node.clock, node.pins, node.end - tail_tokens)
        node.edge = node.edge[k:]
        node.parent = upper
        upper.children[node.edge[:width]] = node
        parent.children[head[:width]] = upper
        self._nodes += 1
        return upper

    def _touch(self, path: list[_Node]) -> None:
        """Give every node of `path` the current clock; queue its end if that is a leaf."""
        clock = self._clock
        for node in path:
            node.clock = clock
        last = path[-1]
        if not last.children and last.pins == 0:
            self._push(last)

    def _push(self, node: _Node) -> None:
        """Queue `node` as an eviction candidate (stale entries are skipped when popped)."""
        heapq.heappush(self._heap, (node.clock, -node.end, next(self._serial), node))
        if len(self._heap) > 1024 and len(self._heap) > 4 * self._nodes:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        """Drop stale heap entries: re-queue exactly the current unpinned leaves."""
        heap = []
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.pins == 0:
                heap.append((node.clock, -node.end, next(self._serial), node))
        heapq.heapify(heap)
        self._heap = heap

    def _evict(self, n_tokens: int, *, protect_clock: int | None) -> int:
        """Free up to `n_tokens` from the LRU unpinned leaves, sparing nodes whose clock is
        `protect_clock` (the path the current call touched); returns the tokens freed."""
        freed = 0
        width = self._width
        while freed < n_tokens and self._heap:
            heap = self._heap  # `_push` may rebuild it
            clock, _, _, node = heap[0]
            if node.parent is None or node.clock != clock or node.children or node.pins:
                heapq.heappop(heap)  # stale: evicted, touched, grown, or pinned since queued
                continue
            if clock == protect_clock:
                break  # every other leaf is gone or pinned: only the protected path is left
            need = n_tokens - freed
            length = len(node.edge) // width
            if need < length:
                node.edge = node.edge[: (length - need) * width]
                node.end -= need
                self._size -= need
                freed += need
                heapq.heapreplace(heap, (clock, -node.end, next(self._serial), node))
                break
            heapq.heappop(heap)
            parent = node.parent
            del parent.children[node.edge[:width]]
            node.parent = None
            self._nodes -= 1
            self._size -= length
            freed += length
            if parent is not self._root and not parent.children and parent.pins == 0:
                self._push(parent)
        return freed
