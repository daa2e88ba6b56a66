"""Grouped-query attention that never copies keys and values once per query head.

SmolLM2-135M (like most current policies) has fewer key/value heads than query heads: 9 query
heads share 3 key/value heads. transformers' `sdpa` attention hands that to
`scaled_dot_product_attention` natively (`enable_gqa`) only when there is no mask; with a mask,
which a left-padded decode batch always has, it first repeats every layer's keys and values to
9 heads (`repeat_kv`), a copy of the whole batch's KV cache per layer per decoded token. On this
2-core CPU, 48 rows of 1,400 tokens (an evaluation's batch late in its episodes) took 103 ms a
layer that way, 3.1 s a decode step for the 30 layers, and most of an episode's time.

`grouped_query_attention` (registered as `agent-rl-gqa`) computes the same attention without
the copy:

- one query token (decoding): the query heads of a group are folded into the query-length
  axis, `[B, 9, 1, D]` -> `[B, 3, 3, D]`, so the call is plain multi-head attention over the
  3 key/value heads, with the row's padding mask broadcast over the group (11 ms a layer on the
  same batch: 9x);
- several query tokens (prefill, training): `scaled_dot_product_attention(enable_gqa=True)`
  with the mask (the same kernel and the same result as the repeated keys, without the copy).

It is the same kernel on the same values in the same precision as `sdpa`, so engine and trainer
agree as before (`tests/core/models/test_attention.py` bounds the difference by rounding).
`use_grouped_query_attention(model)` switches a model that uses `sdpa`; a model loaded with
another implementation (flash attention on a GPU, `eager`) keeps it.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from uni_agent_core.models.blocked_attention_grad import (
    attention_with_blocked_grad,
    uses_blocked_grad,
)

ATTENTION = "agent-rl-gqa"
"""The name of `grouped_query_attention` in transformers' attention registry."""


def grouped_query_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of `query` `[B, Hq, S, D]` over `key`/`value` `[B, Hkv, T, D]` (`Hq` a multiple
    of `Hkv`; query head `h` reads key/value head `h // (Hq // Hkv)`, as in `repeat_kv`).

    `attention_mask` is what transformers' `sdpa_mask` builds: None, or a boolean (or additive)
    mask broadcastable to `[B, 1, S, T]`. Returns `([B, S, Hq, D], None)` like every registered
    attention function.
    """
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if length == 1 and groups > 1:
        folded = query.reshape(batch, kv_heads, groups, dim)
        out = F.scaled_dot_product_attention(
            folded, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
        )
        out = out.reshape(batch, heads, 1, dim)
    elif uses_blocked_grad(query, key, value, attention_mask) and dropout == 0.0:
        if attention_mask is None and causal:
            attention_mask = _top_left_causal_mask(length, key.shape[2], query.device)
        out = attention_with_blocked_grad(query, key, value, attention_mask, scaling)
    else:
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=dropout,
            scale=scaling,
            is_causal=bool(length > 1 and attention_mask is None and causal),
            enable_gqa=groups > 1,
        )
    return out.transpose(1, 2).contiguous(), None


@functools.lru_cache(maxsize=1)
def _top_left_causal_mask(length: int, keys: int, device: torch.device) -> torch.Tensor:
    """What `is_causal=True` means to sdpa (top-left aligned) as a boolean `[1, 1, S, T]` mask:
    the last shape's tensor is kept (one, since it holds S x T bytes), so that every layer of a
    forward hands the blocked backward the same mask and its per-mask plan is worked out once."""
    return torch.ones((length, keys), dtype=torch.bool, device=device).tril()[None, None]


def register_grouped_query_attention() -> None:
    """Make `ATTENTION` a name transformers resolves (the attention and its mask builder)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, grouped_query_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def use_grouped_query_attention(model: Any) -> Any:
    """Switch `model` from `sdpa` to `grouped_query_attention` (other implementations are
    kept); returns `model`."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) not in ("sdpa", ATTENTION):
        return model
    if not hasattr(model, "set_attn_implementation"):  # not a transformers model (a wrapper)
        return model
    register_grouped_query_attention()
    model.set_attn_implementation(ATTENTION)
    return model
