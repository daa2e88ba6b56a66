"""The key/value cache of a decoding batch: left-padded rows that join and leave between steps.

Row `b` holds `lengths[b]` real positions right-aligned in a `[B, heads, L, head_dim]` tensor
per layer; the `L - lengths[b]` leading columns are padding, masked out of attention. Joining
(after a prefill) and leaving (at finish) re-pack the tensors once; a decode step only appends
one column. Positions fed to the model are each row's real length, so padding never shifts
rotary positions and a row decodes exactly as it would alone.
"""

from __future__ import annotations

import torch

from uni_agent_core.inference.prefix_cache import KV


class KVBatch:
    """Left-padded per-layer KV tensors of the running sequences."""

    def __init__(self) -> None:
        self.layers: KV = []
        self.lengths: list[int] = []

    @property
    def size(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return self.layers[0][0].shape[2] if self.layers else 0

    def attention_mask(self, extra: int = 0) -> torch.Tensor:
        """`[B, width + extra]` mask: 0 on left padding, 1 on real and `extra` new positions."""
        width = self.width + extra
        pads = torch.tensor([self.width - n for n in self.lengths])
        return (torch.arange(width)[None, :] >= pads[:, None]).long()

    def positions(self) -> torch.Tensor:
        """`[B, 1]` position ids of the next token of every row."""
        return torch.tensor(self.lengths, dtype=torch.long)[:, None]

    def add(self, rows: list[KV]) -> None:
        """Append rows (each a single-sequence KV of `[1, H, n_i, D]` tensors)."""
        if not rows:
            return
        new_lengths = [row[0][0].shape[2] for row in rows]
        all_lengths = self.lengths + new_lengths
        width = max(all_lengths)
        template = self.layers or rows[0]
        merged: KV = []
        for layer, (k0, v0) in enumerate(template):
            shape_k = (len(all_lengths), k0.shape[1], width, k0.shape[3])
            shape_v = (len(all_lengths), v0.shape[1], width, v0.shape[3])
            keys = k0.new_zeros(shape_k)
            values = v0.new_zeros(shape_v)
            if self.layers:
                old_k, old_v = self.layers[layer]
                keys[: self.size, :, width - old_k.shape[2] :] = old_k
                values[: self.size, :, width - old_v.shape[2] :] = old_v
            for i, row in enumerate(rows):
                k, v = row[layer]
                keys[self.size + i, :, width - k.shape[2] :] = k[0]
                values[self.size + i, :, width - v.shape[2] :] = v[0]
            merged.append((keys, values))
        self.layers = merged
        self.lengths = all_lengths

    def keep(self, indices: list[int]) -> None:
        """Keep only the rows at `indices` (in that order) and drop all-padding columns."""
        if not indices:
            self.layers, self.lengths = [], []
            return
        self.lengths = [self.lengths[i] for i in indices]
        index = torch.tensor(indices, dtype=torch.long, device=self.layers[0][0].device)
        trim = self.width - max(self.lengths)
        self.layers = [
            (k.index_select(0, index)[:, :, trim:], v.index_select(0, index)[:, :, trim:])
            for k, v in self.layers
        ]

    def replace(self, layers: KV) -> None:
        """Take the tensors a decode step returned (one more column for every row)."""
        self.layers = layers
        self.lengths = [n + 1 for n in self.lengths]

    def row(self, index: int) -> KV:
        """A contiguous copy of one row's real positions (for the prefix cache)."""
        n = self.lengths[index]
        return [
            (
                k[index : index + 1, :, k.shape[2] - n :].clone(),
                v[index : index + 1, :, v.shape[2] - n :].clone(),
            )
            for k, v in self.layers
        ]
