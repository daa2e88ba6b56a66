"""The key/value cache of a decoding batch: left-padded rows that join and leave between steps.

Row `b` holds `lengths[b]` real positions right-aligned in the first `width` columns of a
`[B, heads, capacity, head_dim]` buffer per layer; the `width - lengths[b]` leading columns
are padding, masked out of attention, and the columns after `width` are room to grow. Joining
(after a prefill) and leaving (at finish) re-pack the buffers once; a decode step writes its
one new column into the room in place (`cache()` hands the model `AppendLayer`s). HF's own
`DynamicLayer` would instead concatenate, copying the whole batch's KV for every token: for
8 SmolLM2 rows of 1.1K tokens, 400 MB per decode step, most of the step's time on a CPU.
Positions fed to the model are each row's real length, so padding never shifts rotary
positions and a row decodes exactly as it would alone.
"""

from __future__ import annotations

from typing import Any

import torch

from uni_agent_core.inference.prefix_cache import KV

ROOM = 256
"""Columns of room a re-pack leaves after the widest row (then the room doubles as needed)."""


def _layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class AppendLayer(DynamicLayer):
        """A cache layer over a `KVBatch` buffer: `update` writes the new columns in place and
        returns views of the filled part (no copy of what was there)."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, width: int) -> None:
            super().__init__()
            self.buffers = (keys, values)
            self.width = width
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self.keys, self.values = keys[:, :, :width], values[:, :, :width]

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = self.buffers
            end = self.width + key_states.shape[-2]
            if end > keys.shape[2]:
                raise RuntimeError(f"KV buffer of {keys.shape[2]} columns cannot take {end}")
            keys[:, :, self.width : end] = key_states
            values[:, :, self.width : end] = value_states
            self.width = end
            self.keys, self.values = keys[:, :, :end], values[:, :, :end]
            return self.keys, self.values

    return AppendLayer


class KVBatch:
    """Left-padded per-layer KV buffers of the running sequences."""

    def __init__(self) -> None:
        self.buffers: KV = []
        self.lengths: list[int] = []
        self.width = 0
        """Filled columns (the longest row's length)."""

    @property
    def size(self) -> int:
        return len(self.lengths)

    @property
    def layers(self) -> KV:
        """Per-layer `[B, H, width, D]` views of the filled columns."""
        return [(k[:, :, : self.width], v[:, :, : self.width]) for k, v in self.buffers]

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
        (the room is doubled first when it is too small); call `advance` after that forward."""
        from transformers.cache_utils import Cache

        if self.buffers and self.width + new_columns > self.buffers[0][0].shape[2]:
            self._repack(list(range(self.size)), room=max(new_columns, self.width))
        layer = _layer_class()
        return Cache(layers=[layer(k, v, self.width) for k, v in self.buffers])

    def advance(self, new_columns: int = 1) -> None:
        """Record the columns the last forward through `cache()` appended to every row."""
        self.width += new_columns
        self.lengths = [n + new_columns for n in self.lengths]

    def add(self, rows: list[KV]) -> None:
        """Append rows (each a single-sequence KV of `[1, H, n_i, D]` tensors)."""
        if not rows:
            return
        new_lengths = [row[0][0].shape[2] for row in rows]
        all_lengths = self.lengths + new_lengths
        width = max(all_lengths)
        template = self.buffers or rows[0]
        merged: KV = []
        for layer, (k0, v0) in enumerate(template):
            shape_k = (len(all_lengths), k0.shape[1], width + ROOM, k0.shape[3])
            shape_v = (len(all_lengths), v0.shape[1], width + ROOM, v0.shape[3])
            keys = k0.new_zeros(shape_k)
            values = v0.new_zeros(shape_v)
            if self.buffers:
                old_k, old_v = self.buffers[layer]
                keys[: self.size, :, width - self.width : width] = old_k[:, :, : self.width]
                values[: self.size, :, width - self.width : width] = old_v[:, :, : self.width]
            for i, row in enumerate(rows):
                k, v = row[layer]
                keys[self.size + i, :, width - k.shape[2] : width] = k[0]
                values[self.size + i, :, width - v.shape[2] : width] = v[0]
            merged.append((keys, values))
        self.buffers = merged
        self.lengths = all_lengths
        self.width = width

    def keep(self, indices: list[int]) -> None:
        """Keep only the rows at `indices` (in that order) and drop all-padding columns."""
        if not indices:
            self.buffers, self.lengths, self.width = [], [], 0
            return
        self._repack(indices, room=ROOM)

    def _repack(self, indices: list[int], *, room: int) -> None:
        lengths = [self.lengths[i] for i in indices]
        width = max(lengths)
        trim = self.width - width
        index = torch.tensor(indices, dtype=torch.long, device=self.buffers[0][0].device)
        packed: KV = []
        for k, v in self.buffers:
            keys = k.new_zeros((len(indices), k.shape[1], width + room, k.shape[3]))
            values = v.new_zeros((len(indices), v.shape[1], width + room, v.shape[3]))
            keys[:, :, :width] = k.index_select(0, index)[:, :, trim : self.width]
            values[:, :, :width] = v.index_select(0, index)[:, :, trim : self.width]
            packed.append((keys, values))
        self.buffers, self.lengths, self.width = packed, lengths, width

    def row(self, index: int) -> KV:
        """A contiguous copy of one row's real positions (for the prefix cache)."""
        n = self.lengths[index]
        start = self.width - n
        return [
            (
                k[index : index + 1, :, start : self.width].clone(),
                v[index : index + 1, :, start : self.width].clone(),
            )
            for k, v in self.buffers
        ]
