"""bf16 training attention on a CPU: flash forward, blocked matmul backward, same attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from uni_agent_core.models import blocked_attention_grad, cpu_kernels
from uni_agent_core.models.attention import grouped_query_attention
from uni_agent_core.models.blocked_attention_grad import (
    attention_with_blocked_grad,
    uses_blocked_grad,
)


def _inputs(length: int, keys: int, dtype: torch.dtype, batch: int = 1, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, 6, length, 16, generator=generator).to(dtype)
    key = torch.randn(batch, 2, keys, 16, generator=generator).to(dtype)
    value = torch.randn(batch, 2, keys, 16, generator=generator).to(dtype)
    grad_out = torch.randn(batch, 6, length, 16, generator=generator).to(dtype)
    return query, key, value, grad_out


def _prefix_causal(length: int, keys: int, batch: int = 1) -> torch.Tensor:
    """Queries after a prefix of `keys - length` tokens: each sees the prefix and itself back."""
    mask = torch.ones(length, keys, dtype=torch.bool).tril(diagonal=keys - length)
    return mask[None, None].expand(batch, 1, length, keys).clone()


def _grads(fn, query, key, value, grad_out, mask):
    leaves = [t.detach().clone().requires_grad_(True) for t in (query, key, value)]
    out = fn(*leaves, mask)
    out.backward(grad_out)
    return out.detach(), [leaf.grad for leaf in leaves]


def _sdpa(query, key, value, mask):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("length,keys", [(7, 7), (150, 230), (64, 300)])
def test_gradients_match_float32_attention(length: int, keys: int, monkeypatch) -> None:
    # several query blocks, the last one partial, and a causal tail inside each
    monkeypatch.setattr(blocked_attention_grad, "QUERY_BLOCK", 32)
    monkeypatch.setattr(blocked_attention_grad, "NATIVE_QUERY_BLOCK", 32)
    query, key, value, grad_out = _inputs(length, keys, torch.bfloat16)
    mask = _prefix_causal(length, keys)
    out, grads = _grads(attention_with_blocked_grad, query, key, value, grad_out, mask)
    exact_inputs = [t.float() for t in (query, key, value, grad_out)]
    exact_out, exact = _grads(_sdpa, *exact_inputs, mask)
    flash_out, flash = _grads(_sdpa, query, key, value, grad_out, mask)
    assert torch.equal(out, flash_out)  # the forward is the flash kernel's, value for value
    for mine, theirs, truth in zip(grads, flash, exact, strict=True):
        # bf16 gradients: at least as close to float32 as the flash kernel's own backward
        assert _relative(mine, truth) < max(1.5 * _relative(theirs, truth), 5e-3)


def test_a_padded_batch_and_hidden_queries() -> None:
    query, key, value, grad_out = _inputs(12, 20, torch.bfloat16, batch=2, seed=1)
    mask = _prefix_causal(12, 20, batch=2)
    mask[1, :, :, 15:] = False  # the second row's last keys are padding
    mask[1, :, 10:] = False  # and its last queries see nothing
    _, grads = _grads(attention_with_blocked_grad, query, key, value, grad_out, mask)
    exact_inputs = [t.float() for t in (query, key, value)]
    _, exact = _grads(_sdpa, *exact_inputs, grad_out.float(), mask)
    assert all(torch.isfinite(g).all() for g in grads)
    assert grads[0][1, :, 10:].abs().max() == 0  # no gradient to a query that sees nothing
    visible_rows = (slice(None), slice(None), slice(0, 10))
    assert _relative(grads[0][1][visible_rows[1:]], exact[0][1][visible_rows[1:]]) < 1e-2
    assert _relative(grads[1], exact[1]) < 1e-2
    assert _relative(grads[2], exact[2]) < 1e-2


def test_only_16_bit_training_on_a_cpu_takes_it() -> None:
    query, key, value, _ = _inputs(5, 5, torch.bfloat16)
    assert not uses_blocked_grad(query, key, value, None)  # nothing needs a gradient
    query.requires_grad_(True)
    assert uses_blocked_grad(query, key, value, None)
    assert not uses_blocked_grad(query, key, value, torch.zeros(1, 1, 5, 5))  # additive mask
    assert not uses_blocked_grad(query[:, :, :1], key, value, None)  # one query: decoding
    with torch.no_grad():
        assert not uses_blocked_grad(query, key, value, None)
    exact = [t.float().requires_grad_(True) for t in (query.detach(), key, value)]
    assert not uses_blocked_grad(*exact, None)  # float32 keeps the exact kernel


def test_the_registered_attention_routes_bf16_training_through_it() -> None:
    query, key, value, grad_out = _inputs(9, 9, torch.bfloat16)
    module = torch.nn.Module()
    module.is_causal = True

    def registered(q, k, v, mask):
        out, _ = grouped_query_attention(module, q, k, v, mask)
        return out.transpose(1, 2)

    out, grads = _grads(registered, query, key, value, grad_out, None)
    flash_out, _ = _grads(_sdpa, query, key, value, grad_out, _prefix_causal(9, 9))
    assert torch.equal(out, flash_out)
    # no mask and a causal module: the registered function builds the causal mask itself
    causal = _prefix_causal(9, 9)
    _, blocked = _grads(attention_with_blocked_grad, query, key, value, grad_out, causal)
    assert all(torch.equal(a, b) for a, b in zip(grads, blocked, strict=True))


@pytest.fixture
def native_kernel():
    if cpu_kernels.attention_scores_ops() is None:
        pytest.skip("the native attention kernel does not run on this CPU (needs AVX-512 and AMX)")


@pytest.mark.parametrize("length,keys,dim", [(150, 230, 16), (100, 260, 64), (7, 7, 32)])
def test_the_native_kernel_computes_what_the_python_path_does(
    length: int, keys: int, dim: int, native_kernel, monkeypatch
) -> None:
    # several query blocks, key counts that are not a multiple of the kernel's 64-key tiles,
    # a causal tail in each block, padding keys and queries that see nothing
    monkeypatch.setattr(blocked_attention_grad, "QUERY_BLOCK", 32)
    monkeypatch.setattr(blocked_attention_grad, "NATIVE_QUERY_BLOCK", 32)
    generator = torch.Generator().manual_seed(3)
    query, key, value, grad_out = (
        torch.randn(2, heads, rows, dim, generator=generator).bfloat16()
        for heads, rows in ((6, length), (2, keys), (2, keys), (6, length))
    )
    mask = _prefix_causal(length, keys, batch=2)
    mask[1, :, :, keys - 3 :] = False
    mask[1, :, length - 2 :] = False
    _, native = _grads(attention_with_blocked_grad, query, key, value, grad_out, mask)
    monkeypatch.setattr(blocked_attention_grad, "attention_scores_ops", lambda: None)
    _, python = _grads(attention_with_blocked_grad, query, key, value, grad_out, mask)
    for mine, theirs in zip(native, python, strict=True):
        # the same float32 products; only exp's last bits and bf16 rounding of results differ
        assert _relative(mine, theirs) < 2e-3
    assert native[0][1, :, length - 2 :].abs().max() == 0
