"""The key/value cache of a decoding batch: left-padded rows that join and leave between steps.

Each layer has one `[R, heads, C, head_dim]` buffer per keys and values, with room for more rows
and columns than the batch uses. The batch's rows are the first `size` slots; their real
positions are right-aligned at column `end`, row `b` in `[end - lengths[b], end)`, and the
batch's columns are `[start, end)`: `width = end - start` columns, the longest row's length.
Columns of a row before its own start are padding, masked out of attention (their values are
whatever an earlier row left there, never read).

What each change costs:

- a decode step writes its one new column at `end` in place (`cache()` hands the model
  `AppendLayer`s over views of the buffers); HF's own `DynamicLayer` would concatenate, copying
  the whole batch's KV for every token;
- a row that joins writes only itself, into the next free slot, when it fits in the columns
  left of `end` (`start` moves left to take a row longer than the others);
- a row that leaves moves at most one other row: the last row takes its slot (`remove` says
  which slot each remaining row then holds); when the longest rows leave, `start` moves right;
- the buffers are reallocated and the rows copied (a re-pack) only when a joining row does not
  fit left of `end`, the columns right of `end` run out, or the slots run out; a re-pack leaves
  `ROOM` columns on each side and doubles the slots. Before these rules, every join and every
  leave re-packed the whole batch: on 48 evaluation rows of ~1,500 tokens, as much time as the
  attention itself.

Positions fed to the model are each row's real length, so padding never shifts rotary
positions and a row decodes exactly as it would alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from uni_agent_core.inference.prefix_cache import KV

ROOM = 256
"""Columns a re-pack leaves free on each side of the rows (the right side then doubles as
needed)."""


def _layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class AppendLayer(DynamicLayer):
        """A cache layer over a `KVBatch` buffer: `update` writes the new columns in place and
        returns views of the filled part (no copy of what was there)."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, start: int, end: int) -> None:
            super().__init__()
            self.buffers = (keys, values)
            self.start, self.end = start, end
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self.keys, self.values = keys[:, :, start:end], values[:, :, start:end]

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = self.buffers
            end = self.end + key_states.shape[-2]
            if end > keys.shape[2]:
                raise RuntimeError(f"KV buffer of {keys.shape[2]} columns cannot take {end}")
            keys[:, :, self.end : end] = key_states
            values[:, :, self.end : end] = value_states
            self.end = end
            self.keys, self.values = keys[:, :, self.start : end], values[:, :, self.start : end]
            return self.keys, self.values

    return AppendLayer


class KVBatch:
    """Left-padded per-layer KV buffers of the running sequences (see the module docstring)."""

    def __init__(self) -> None:
        self.buffers: KV = []
        """Per layer, the `[R, H, C, D]` key and value buffers (R slots, C columns)."""
        self.lengths: list[int] = []
        self.start = 0
        self.end = 0
        self.repacks = 0
        """Re-packs so far (each copies every row; joins and leaves that fit copy none)."""

    @property
    def size(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        """Filled columns (the longest row's length)."""
        return self.end - self.start

    @property
    def layers(self) -> KV:
        """Per-layer `[B, H, width, D]` views of the filled columns."""
        return [
            (k[: self.size, :, self.start : self.end], v[: self.size, :, self.start : self.end])
            for k, v in self.buffers
        ]

    def attention_mask(self, extra: int = 0) -> torch.Tensor:
        """`[B, width + extra]` mask: 0 on left padding, 1 on real and `extra` new positions."""
        width = self.width + extra
        pads = torch.tensor([self.width - n for n in self.lengths])
        return (torch.arange(width)[None, :] >= pads[:, None]).long()

    def positions(self) -> torch.Tensor:
        """`[B, 1]` position ids of the next token of every row."""
        return torch.tensor(self.lengths, dtype=torch.long)[:, None]

    def cache(self, new_columns: int = 1) -> Any:
        """An HF cache over the buffers that the next forward appends `new_columns` to in place
        (the buffers are re-packed first when the room right of the rows is too small); call
        `advance` after that forward."""
        from transformers.cache_utils import Cache

        if self.buffers and self.end + new_columns > self.buffers[0][0].shape[2]:
            self._repack(self.width, right=max(new_columns, self.width))
        layer = _layer_class()
        rows = self.size
        return Cache(
            layers=[layer(k[:rows], v[:rows], self.start, self.end) for k, v in self.buffers]
        )

    def advance(self, new_columns: int = 1) -> None:
        """Record the columns the last forward through `cache()` appended to every row."""
        self.end += new_columns
        self.lengths = [n + new_columns for n in self.lengths]

    def add(self, rows: list[KV]) -> None:
        """Append rows (each a single-sequence KV of `[1, H, n_i, D]` tensors) after the
        current ones, in order."""
        if not rows:
            return
        longest = max(row[0][0].shape[2] for row in rows)
        if not self.buffers:
            self._allocate(rows[0], slots=len(rows), width=longest)
        elif longest > self.end or self.size + len(rows) > self.buffers[0][0].shape[0]:
            slots = max(self.size + len(rows), 2 * self.buffers[0][0].shape[0])
            self._repack(max(self.width, longest), slots=slots)
        self.start = min(self.start, self.end - longest)
        for row in rows:
            slot, n = self.size, row[0][0].shape[2]
            for (keys, values), (k, v) in zip(self.buffers, row, strict=True):
                keys[slot, :, self.end - n : self.end] = k[0]
                values[slot, :, self.end - n : self.end] = v[0]
            self.lengths.append(n)

    def remove(self, slots: Iterable[int]) -> list[int]:
        """Drop the rows in `slots`; returns, for each remaining row in its new slot order, the
        slot it held before (rows from the end fill the freed slots, one row copy each)."""
        gone = set(slots)
        survivors = [i for i in range(self.size) if i not in gone]
        if not survivors:
            self.buffers, self.lengths, self.start, self.end = [], [], 0, 0
            return []
        kept = len(survivors)
        order = list(range(kept))
        movers = [i for i in survivors if i >= kept]
        holes = [i for i in range(kept) if i in gone]
        for hole, source in zip(holes, movers, strict=True):
            for keys, values in self.buffers:
                keys[hole, :, self.start : self.end] = keys[source, :, self.start : self.end]
                values[hole, :, self.start : self.end] = values[source, :, self.start : self.end]
            order[hole] = source
        self.lengths = [self.lengths[i] for i in order]
        self.start = self.end - max(self.lengths)
        return order

    def row(self, index: int) -> KV:
        """A contiguous copy of one row's real positions (for the prefix cache)."""
        start = self.end - self.lengths[index]
        return [
            (
                k[index : index + 1, :, start : self.end].clone(),
                v[index : index + 1, :, start : self.end].clone(),
            )
            for k, v in self.buffers
        ]

    def _allocate(self, template: KV, *, slots: int, width: int, right: int = ROOM) -> KV:
        """Zeroed buffers shaped like `template`'s layers, with `slots` slots and room for rows
        of `width` columns ending at `ROOM + width`, `right` columns after them."""
        old = self.buffers
        self.buffers = [
            (
                k.new_zeros((slots, k.shape[1], ROOM + width + right, k.shape[3])),
                v.new_zeros((slots, v.shape[1], ROOM + width + right, v.shape[3])),
            )
            for k, v in template
        ]
        self.start = self.end = ROOM + width
        self.repacks += 1
        return old

    def _repack(self, width: int, *, right: int = ROOM, slots: int | None = None) -> None:
        """Copy the rows into new buffers that fit rows of `width` columns (at least the
        current rows' width), `right` columns of room after them and `slots` slots."""
        rows, start, end = self.size, self.start, self.end
        slots = slots or self.buffers[0][0].shape[0]
        old = self._allocate(self.buffers, slots=slots, width=width, right=right)
        self.start = self.end - (end - start)
        for (keys, values), (old_k, old_v) in zip(self.buffers, old, strict=True):
            keys[:rows, :, self.start : self.end] = old_k[:rows, :, start:end]
            values[:rows, :, self.start : self.end] = old_v[:rows, :, start:end]
