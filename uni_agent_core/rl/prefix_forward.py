"""Logprobs of a step's rows with their shared prompt prefix run once, gradients exact.

Every episode of a step opens with the same system + tools prompt (about 880 of a 1,400-token
SmolLM2 micro-swe episode). `SharedPrefix` runs the decoder over that prefix once, keeps the
graph, and hands each micro-batch the prefix's keys and values as *leaf* tensors: a row's
forward attends to them as to a KV cache, its backward accumulates their gradients there, and
`SharedPrefix.backward()` sends the accumulated gradients through the prefix graph once at the
end of the step. The weights' gradients are then those of running every full row (the prefix
contributes through every row's attention), not a detached approximation.

`row_logprobs` then projects onto the vocabulary only the positions whose next token carries
loss (the LM head and `log_softmax` over 49K columns are skipped on prompt and tool-output
positions); more than `chunk_tokens` of them go in checkpointed chunks like
`logprobs.token_logprobs` (one chunk is kept, not recomputed in the backward pass).

Shapes: B rows, S suffix tokens (a row's tokens after the prefix), N loss positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from uni_agent_core.rl.batch import TrajectoryBatch
from uni_agent_core.rl.logprobs import chunk_logprobs, decoder_and_head


def common_prefix_length(rows: Sequence[torch.Tensor], limit: int) -> int:
    """Length of the token prefix every row shares, at most `limit`."""
    if not rows:
        return 0
    first = rows[0]
    length = max(0, min(limit, *(int(row.numel()) for row in rows)))
    for row in rows[1:]:
        if length == 0:
            break
        differs = (row[:length] != first[:length]).nonzero()
        if differs.numel():
            length = int(differs[0])
    return max(length, 0)


def rows_prefix_length(batch: TrajectoryBatch, rows: Sequence[int]) -> int:
    """Tokens every row of `rows` shares before the first position its loss needs (the most a
    `SharedPrefix` of theirs may hold)."""
    rows = list(rows)
    first_loss = int(batch.loss_mask_B_T[rows].argmax(dim=1).min())
    ids = [batch.input_ids_B_T[r, : int(batch.attention_mask_B_T[r].sum())] for r in rows]
    return common_prefix_length(ids, limit=first_loss - 1)


def _cache(model: Any, layers: Sequence[tuple[torch.Tensor, torch.Tensor]], rows: int) -> Any:
    """A fresh HF cache holding the prefix's keys/values broadcast to `rows` rows (no copy)."""
    from transformers import DynamicCache

    expanded = [
        (keys.expand(rows, *keys.shape[1:]), values.expand(rows, *values.shape[1:]))
        for keys, values in layers
    ]
    return DynamicCache(ddp_cache_data=expanded, config=model.config)


class SharedPrefix:
    """A prefix shared by rows: its keys/values for them, and its deferred backward.

    Prefixes nest: `extend(ids)` makes the prefix of a subset of rows that continue this one
    with the same `ids` (the GRPO group's task statement after the step's system prompt); its
    backward sends gradients into the weights and into this prefix's keys/values, so the
    nested prefix must run its `backward()` before this one.
    """

    def __init__(
        self, model: Any, prefix_ids: torch.Tensor, parent: SharedPrefix | None = None
    ) -> None:
        """Run the decoder over `prefix_ids` (1-D; the tokens after `parent`'s, if given); with
        grad enabled the graph is kept until `backward()`. An empty prefix without a parent
        makes every row run in full."""
        self.model = model
        self.length: int = int(prefix_ids.numel()) + (parent.length if parent else 0)
        self._outputs: list[tuple[torch.Tensor, torch.Tensor]] = []
        """(graph output, the leaf the rows read in its place) of each key/value that needs a
        gradient."""
        self._leaves: list[tuple[torch.Tensor, torch.Tensor]] = []
        if parent is not None and prefix_ids.numel() == 0:
            self._leaves = parent._leaves
            return
        if self.length == 0:
            return
        decoder, _ = decoder_and_head(model)
        ids = prefix_ids.view(1, -1)
        if parent is not None:
            mask = torch.ones((1, self.length), dtype=ids.dtype, device=ids.device)
            cache = _cache(model, parent._leaves, 1)
            out = decoder(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        else:
            out = decoder(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        for keys, values, *_ in out.past_key_values:
            if keys.requires_grad:  # not in a frozen layer (`trainable.py`) or under no_grad
                key_leaf = keys.detach().requires_grad_(True)
                value_leaf = values.detach().requires_grad_(True)
                self._outputs += [(keys, key_leaf), (values, value_leaf)]
                keys, values = key_leaf, value_leaf
            self._leaves.append((keys, values))

    def extend(self, ids: torch.Tensor) -> SharedPrefix:
        """The nested prefix `self + ids` (1-D ids after this prefix's tokens)."""
        return SharedPrefix(self.model, ids, parent=self)

    def hidden(self, suffix_ids_B_S: torch.Tensor, suffix_mask_B_S: torch.Tensor) -> torch.Tensor:
        """Last hidden states of rows `prefix + suffix` at their suffix positions: [B, S, H]."""
        decoder, _ = decoder_and_head(self.model)
        if self.length == 0:
            out = decoder(input_ids=suffix_ids_B_S, attention_mask=suffix_mask_B_S)
            return out.last_hidden_state
        rows = suffix_ids_B_S.shape[0]
        mask = torch.cat([suffix_mask_B_S.new_ones((rows, self.length)), suffix_mask_B_S], dim=1)
        return decoder(
            input_ids=suffix_ids_B_S,
            attention_mask=mask,
            past_key_values=_cache(self.model, self._leaves, rows),
            use_cache=True,
        ).last_hidden_state

    def backward(self) -> None:
        """Send the gradients the rows left on the prefix's keys/values through the prefix (a
        nested prefix that added no tokens leaves them on its parent's, for the parent's)."""
        if not self._outputs:
            self.release()
            return
        pairs = [(out, leaf.grad) for out, leaf in self._outputs if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        self.release()

    def release(self) -> None:
        """Drop the prefix graph and its keys/values (a nested prefix that added no tokens
        shares its parent's, which stay)."""
        self._outputs, self._leaves = [], []


def row_logprobs(
    prefix: SharedPrefix,
    input_ids_B_T: torch.Tensor,
    attention_mask_B_T: torch.Tensor,
    loss_mask_B_T: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 512,
) -> torch.Tensor:
    """`logprobs[b, s] = log p(token P+s | tokens < P+s)` at loss positions, 0.0 elsewhere.

    Args:
        prefix: the step's shared prefix (length P; every row starts with it).
        input_ids_B_T, attention_mask_B_T, loss_mask_B_T: the micro-batch's right-padded rows,
            full length (prefix included); no loss position may lie inside the prefix.
        temperature: the engines' sampling temperature.
        chunk_tokens: loss positions projected onto the vocabulary at once.

    Returns:
        Float32 `[B, T - P]` aligned to the tokens after the prefix, differentiable when grad
        is enabled.
    """
    start = prefix.length
    if bool(loss_mask_B_T[:, : start + 1].any()):
        raise ValueError(f"a loss position lies inside the shared prefix of {start} tokens")
    hidden_B_S_H = prefix.hidden(input_ids_B_T[:, start:], attention_mask_B_T[:, start:])
    rows, tokens = torch.nonzero(loss_mask_B_T[:, start:], as_tuple=True)
    # token P+s is predicted from the hidden state at P+s-1, i.e. suffix position s-1
    hidden_N_H = hidden_B_S_H[rows, tokens - 1]
    targets_N = input_ids_B_T[rows, tokens + start]
    _, head = decoder_and_head(prefix.model)
    pieces = []
    chunked = int(targets_N.numel()) > chunk_tokens
    for first in range(0, int(targets_N.numel()), chunk_tokens):
        chunk = (
            head,
            hidden_N_H[first : first + chunk_tokens],
            targets_N[first : first + chunk_tokens],
            temperature,
        )
        if chunked and torch.is_grad_enabled():
            pieces.append(checkpoint(chunk_logprobs, *chunk, use_reentrant=False))
        else:
            pieces.append(chunk_logprobs(*chunk))
    values_N = torch.cat(pieces) if pieces else hidden_B_S_H.new_zeros((0,), dtype=torch.float32)
    out = torch.zeros(hidden_B_S_H.shape[:2], dtype=torch.float32, device=hidden_B_S_H.device)
    return out.index_put((rows, tokens), values_N)
