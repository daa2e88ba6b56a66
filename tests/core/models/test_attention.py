"""The copy-free grouped-query attention: the same attention as transformers' `sdpa`."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from uni_agent_core.models import load_policy
from uni_agent_core.models.attention import (
    ATTENTION,
    grouped_query_attention,
    use_grouped_query_attention,
)


def _repeated(query, key, value, mask):
    """The reference: keys and values repeated to every query head (what `sdpa` does)."""
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    causal = mask is None and query.shape[2] > 1
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=causal)


@pytest.mark.parametrize("length", [1, 5])
@pytest.mark.parametrize("masked", [True, False])
def test_it_equals_attention_over_repeated_keys(length: int, masked: bool) -> None:
    torch.manual_seed(0)
    batch, heads, kv_heads, keys, dim = 4, 9, 3, 37, 16
    query = torch.randn(batch, heads, length, dim, dtype=torch.float64)
    key = torch.randn(batch, kv_heads, keys, dim, dtype=torch.float64)
    value = torch.randn(batch, kv_heads, keys, dim, dtype=torch.float64)
    mask = None
    if masked:  # left padding of 3*b columns for row b, causal over the last `length` keys
        position = torch.arange(keys - length, keys).view(length, 1)
        mask = (torch.arange(keys).view(1, keys) <= position).expand(batch, 1, length, keys)
        mask = mask & (torch.arange(keys) >= 3 * torch.arange(batch).view(batch, 1, 1, 1))
    module = torch.nn.Module()
    out, weights = grouped_query_attention(module, query, key, value, mask)
    assert weights is None
    expected = _repeated(query, key, value, mask).transpose(1, 2)
    assert out.shape == (batch, length, heads, dim)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_a_policy_decodes_a_padded_batch_as_with_sdpa() -> None:
    """The tiny policy (4 query heads over 2 key/value heads), float32: a left-padded prefill
    then one decode step give the logits of the model left on `sdpa`."""
    model, _ = load_policy("tiny")
    assert model.config._attn_implementation == ATTENTION
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("sdpa")
    torch.manual_seed(0)
    batch, width = 3, 24
    ids = torch.randint(0, model.config.vocab_size, (batch, width))
    mask = torch.ones(batch, width, dtype=torch.long)
    for row in range(batch):
        mask[row, : 5 * row] = 0
    with torch.inference_mode():
        ours = model(input_ids=ids, attention_mask=mask, use_cache=True)
        theirs = reference(input_ids=ids, attention_mask=mask, use_cache=True)
        real = mask.bool()
        torch.testing.assert_close(ours.logits[real], theirs.logits[real], rtol=1e-5, atol=1e-5)
        step = torch.randint(0, model.config.vocab_size, (batch, 1))
        mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], dim=1)
        positions = mask.sum(dim=1, keepdim=True) - 1
        ours = model(
            input_ids=step,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=ours.past_key_values,
        )
        theirs = reference(
            input_ids=step,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=theirs.past_key_values,
        )
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)


def test_another_implementation_is_kept() -> None:
    model, _ = load_policy("tiny")
    model.set_attn_implementation("eager")
    use_grouped_query_attention(model)
    assert model.config._attn_implementation == "eager"
