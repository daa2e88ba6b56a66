"""Training attention for bf16 on a CPU: the flash kernel forward, a blocked matmul backward.

PyTorch's CPU flash-attention backward does not profit from bf16: on 2 EPYC cores one SmolLM2
layer of a training row (9 query heads over 3 key/value heads, 600 queries after a 879-token
prefix) took 4 ms forward and about 28 ms backward, in bf16 as in float32, and that backward
was 39% of a bf16 trainer step. `attention_with_blocked_grad` keeps the flash kernel's forward
(the same values the engine and the no-grad forward compute) and saves its log-sum-exp; its
backward recomputes the attention probabilities a block of queries at a time and forms the
gradients with batched matmuls (22 ms for that layer, and closer to the float32 gradient than
the flash kernel's own bf16 backward):

    P  = exp(Q K^T * scale - lse)            (float32 scores; masked entries 0)
    dV = P^T dO
    dS = P * (dO V^T - rowsum(dO * O)) * scale
    dQ = dS K,  dK = dS^T Q

The two score products (`Q K^T`, `dO V^T`) take bf16 operands and need float32 results. On a
CPU with AMX the native kernel of `cpu_kernels.py` computes a block's `P` and `dS` in one pass
(bf16 brgemm with float32 accumulators); elsewhere float32 matmuls do (`_PythonScores`). On 2
Xeon cores with AMX, that layer's forward and backward took 21 ms with the kernel, 25 without.

Query heads are folded onto their key/value head (`[B, Hq, S, D]` -> `[B, Hkv, g*S, D]`, as
the decode path of `attention.grouped_query_attention` does), so keys and values are never
repeated per query head. A block of queries only reads keys up to the last one its mask
allows, so a causal mask after a shared prefix skips the upper triangle.

Shapes: B batch, Hq query heads, Hkv key/value heads, g = Hq / Hkv, S queries, K keys, D head
width.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from uni_agent_core.models.cpu_kernels import attention_scores_ops

QUERY_BLOCK = 64
"""Queries (per query head) whose probabilities one backward block holds, on the float32 path:
64 x 9 heads x 1,479 keys is 3.4 MB of float32, which stays in cache (blocks of 256 were 40%
slower on 2 EPYC cores)."""
NATIVE_QUERY_BLOCK = 128
"""The same with the native kernel, which keeps its float32 tiles to itself: larger blocks give
the three bf16 products that remain longer inner dimensions (one SmolLM2 layer's forward and
backward: 19.6 ms with blocks of 64, 17.7 with 128, 17.5 with 256)."""


def uses_blocked_grad(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None
) -> bool:
    """True where `attention_with_blocked_grad` should run: a CPU, a 16-bit dtype, several
    queries, no mask or a boolean one, and a gradient to compute."""
    return (
        query.device.type == "cpu"
        and (mask is None or mask.dtype == torch.bool)
        and query.dtype in (torch.bfloat16, torch.float16)
        and query.shape[2] > 1
        and torch.is_grad_enabled()
        and (query.requires_grad or key.requires_grad or value.requires_grad)
    )


def attention_with_blocked_grad(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of `query` `[B, Hq, S, D]` over `key`/`value` `[B, Hkv, K, D]` with the blocked
    backward; `attention_mask` is None or boolean, broadcastable to `[B, 1, S, K]` (True: the
    key is visible). Returns `[B, Hq, S, D]`."""
    batch, heads, length, dim = query.shape
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        raise TypeError(f"the blocked backward takes a boolean mask, got {attention_mask.dtype}")
    plan = _mask_plan(attention_mask, batch, length, key.shape[2], heads // key.shape[1], query)
    return _BlockedGradAttention.apply(
        query, key, value, plan, dim**-0.5 if scale is None else scale
    )


@dataclass(frozen=True)
class _MaskPlan:
    """What one attention mask means to the kernels, worked out once for all the layers of a
    forward (transformers builds one mask per forward and hands it to every layer)."""

    visible_B_S_K: torch.Tensor
    additive_B_1_gS_K: torch.Tensor
    """The flash kernel's mask over folded queries: 0 where visible, -inf where hidden."""
    bounds: list[list[tuple[int, int, int, int]]]
    """Per batch element, `_block_bounds` of its queries."""


_last_plan: tuple[Any, tuple, _MaskPlan] | None = None


def _mask_plan(
    mask: torch.Tensor | None, batch: int, length: int, keys: int, groups: int, like: torch.Tensor
) -> _MaskPlan:
    global _last_plan
    block = _query_block(like.dtype)
    shape = (batch, length, keys, groups, like.dtype, like.device, block)
    if mask is not None and _last_plan is not None:
        source, cached_shape, plan = _last_plan
        if source() is mask and cached_shape == shape:
            return plan
    if mask is None:
        visible = torch.ones((batch, length, keys), dtype=torch.bool, device=like.device)
    else:
        visible = mask.expand(batch, 1, length, keys)[:, 0]
    additive = torch.zeros((), dtype=like.dtype, device=like.device).masked_fill(
        ~visible, float("-inf")
    )
    plan = _MaskPlan(
        visible_B_S_K=visible,
        additive_B_1_gS_K=additive.repeat(1, groups, 1).unsqueeze(1),
        bounds=[_block_bounds(visible[b], block) for b in range(batch)],
    )
    if mask is not None:
        _last_plan = (weakref.ref(mask), shape, plan)
    return plan


def _native_scores(dtype: torch.dtype) -> Any | None:
    """The native kernel's operators where they compute this dtype's scores, else None."""
    return attention_scores_ops() if dtype == torch.bfloat16 else None


def _query_block(dtype: torch.dtype) -> int:
    return QUERY_BLOCK if _native_scores(dtype) is None else NATIVE_QUERY_BLOCK


def _fold(x_B_H_S_D: torch.Tensor, kv_heads: int) -> torch.Tensor:
    batch, heads, length, dim = x_B_H_S_D.shape
    return x_B_H_S_D.reshape(batch, kv_heads, (heads // kv_heads) * length, dim)


class _BlockedGradAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        plan: _MaskPlan,
        scale: float,
    ) -> torch.Tensor:
        batch, heads, length, dim = query.shape
        kv_heads = key.shape[1]
        out_folded, lse_folded = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            _fold(query, kv_heads), key, value, attn_mask=plan.additive_B_1_gS_K, scale=scale
        )[:2]
        ctx.save_for_backward(query, key, value, out_folded, lse_folded)
        ctx.plan, ctx.scale = plan, scale
        return out_folded.view(batch, heads, length, dim)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        query, key, value, out_folded, lse_folded = ctx.saved_tensors
        plan: _MaskPlan = ctx.plan
        batch, heads, length, dim = query.shape
        kv_heads = key.shape[1]
        groups = heads // kv_heads
        grads = [
            _blocked_backward(
                _fold(query[b : b + 1], kv_heads)[0].view(kv_heads, groups, length, dim),
                key[b],
                value[b],
                plan.visible_B_S_K[b],
                plan.bounds[b],
                out_folded[b].view(kv_heads, groups, length, dim),
                _fold(grad_out[b : b + 1], kv_heads)[0].view(kv_heads, groups, length, dim),
                lse_folded[b].view(kv_heads, groups, length),
                ctx.scale,
            )
            for b in range(batch)
        ]
        grad_query = torch.stack([g[0] for g in grads]).view(batch, heads, length, dim)
        grad_key = torch.stack([g[1] for g in grads])
        grad_value = torch.stack([g[2] for g in grads])
        return grad_query, grad_key, grad_value, None, None


def _block_bounds(visible_S_K: torch.Tensor, block: int) -> list[tuple[int, int, int, int]]:
    """Per block of queries `(first, last, masked_from, end)`: the keys at `end` and after are
    hidden from every query of the block, the keys before `masked_from` visible to all of them
    (`end` 0: the block sees nothing)."""
    length, keys = visible_S_K.shape
    columns = torch.arange(1, keys + 1, device=visible_S_K.device)
    last_visible = (visible_S_K * columns).amax(dim=1)  # per query: its last visible key + 1
    first_hidden = torch.where(visible_S_K, keys, columns - 1).amin(dim=1)
    bounds = []
    for first in range(0, length, block):
        last = min(length, first + block)
        end = int(last_visible[first:last].max())
        bounds.append((first, last, min(int(first_hidden[first:last].min()), end), end))
    return bounds


def _blocked_backward(
    query_G_g_S_D: torch.Tensor,
    key_G_K_D: torch.Tensor,
    value_G_K_D: torch.Tensor,
    visible_S_K: torch.Tensor,
    bounds: list[tuple[int, int, int, int]],
    out_G_g_S_D: torch.Tensor,
    grad_out_G_g_S_D: torch.Tensor,
    lse_G_g_S: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch element's gradients (G key/value heads, g query heads each).

    The queries are laid out query-major (`[G, S, g, D]`), so that a block of them is one
    contiguous `[G, n*g, D]` matrix. A block's probabilities and score gradients, which exp()
    and the softmax correction amplify, are computed from float32 products (`_NativeScores` or
    `_PythonScores`) and handed over in the compute dtype; the three products that only sum
    them (dV, dQ, dK) run in the compute dtype, as the flash kernel's backward does.
    """
    kv_heads, groups, length, dim = query_G_g_S_D.shape
    keys = key_G_K_D.shape[1]

    def query_major(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()

    query = query_major(query_G_g_S_D)
    grad_out = query_major(grad_out_G_g_S_D)
    grad_out_f32 = grad_out.float()
    # rowsum(dO * O), the softmax backward's correction term: [G, S, g]
    delta = (grad_out_f32 * query_major(out_G_g_S_D).float()).sum(-1)
    # a query that sees no key has lse -inf and no gradient: +inf makes its probabilities 0
    lse = query_major(lse_G_g_S)
    lse = lse.masked_fill(lse.isneginf(), float("inf"))
    operands = _Operands(
        query=query,
        key=key_G_K_D,
        value=value_G_K_D,
        grad_out=grad_out,
        grad_out_f32=grad_out_f32,
        lse=lse,
        delta=delta,
        scale=scale,
        block_rows=max(last - first for first, last, _, _ in bounds),
    )
    ops = _native_scores(query.dtype)
    scores = _NativeScores(ops, operands) if ops is not None else _PythonScores(operands)
    grad_query = torch.empty_like(query)
    grad_key = torch.zeros((kv_heads, keys, dim), dtype=torch.float32, device=query.device)
    grad_value = torch.zeros_like(grad_key)
    for first, last, masked_from, end in bounds:
        n = last - first
        if end == 0:
            grad_query[:, first:last] = 0
            continue
        probs, grad_scores = scores.block(first, last, masked_from, end, visible_S_K)
        grad_value[:, :end] += torch.bmm(probs.transpose(1, 2), _rows(grad_out, first, last))
        grad_query[:, first:last] = torch.bmm(grad_scores, key_G_K_D[:, :end]).view(
            kv_heads, n, groups, dim
        )
        grad_key[:, :end] += torch.bmm(grad_scores.transpose(1, 2), _rows(query, first, last))
    dtype = query.dtype
    return grad_query.transpose(1, 2), grad_key.to(dtype), grad_value.to(dtype)


def _rows(x_G_S_g: torch.Tensor, first: int, last: int) -> torch.Tensor:
    """Queries `first:last` of a query-major tensor (`[G, S, g, ...]`) as one `[G, n*g, ...]`
    block (a view: the block's queries are contiguous)."""
    return x_G_S_g[:, first:last].flatten(1, 2)


@dataclass(frozen=True)
class _Operands:
    """One batch element's backward operands, query-major: `query`, `grad_out` and
    `grad_out_f32` `[G, S, g, D]`, `lse` and `delta` `[G, S, g]`, `key` and `value` `[G, K, D]`;
    `block_rows` is the largest block's query count."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    grad_out: torch.Tensor
    grad_out_f32: torch.Tensor
    lse: torch.Tensor
    delta: torch.Tensor
    scale: float
    block_rows: int

    @property
    def score_numel(self) -> int:
        """Elements of the largest block's scores (`[G, block_rows * g, K]`)."""
        kv_heads, _, groups, _ = self.query.shape
        return kv_heads * self.block_rows * groups * self.key.shape[1]


class _NativeScores:
    """A block's probabilities and score gradients from the native kernel (`cpu_kernels.py`):
    bf16 products with float32 accumulation, exp and correction applied per tile in cache."""

    def __init__(self, ops: Any, operands: _Operands) -> None:
        self.ops, self.operands = ops, operands
        self.keys_packed = ops.pack_keys(operands.key.contiguous())
        self.values_packed = ops.pack_keys(operands.value.contiguous())
        dtype = operands.query.dtype
        self.buffers = _workspace.take(operands.score_numel, (dtype, dtype), operands.query.device)

    def block(
        self, first: int, last: int, masked_from: int, end: int, visible_S_K: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.operands
        kv_heads, _, groups, _ = o.query.shape
        shape = (kv_heads, (last - first) * groups, end)
        probs, grad_scores = (b[: shape[0] * shape[1] * end].view(shape) for b in self.buffers)
        self.ops.attention_grad_scores(
            _rows(o.query, first, last),
            self.keys_packed,
            _rows(o.grad_out, first, last),
            self.values_packed,
            _rows(o.lse, first, last),
            _rows(o.delta, first, last),
            visible_S_K[first:last],
            masked_from,
            groups,
            o.scale,
            probs,
            grad_scores,
        )
        return probs, grad_scores


class _PythonScores:
    """A block's probabilities and score gradients from float32 matmuls.

    Each float32 product comes out of one matmul, its row offset included: the operands carry
    one more column (`[scale * q, -lse] . [k, 1] = scale * q.k - lse`, and likewise
    `scale * (dO.v - rowsum(dO * O))`), so no pass over a block's scores broadcasts the offset.
    A block's scores live in `_workspace` buffers that every block and call reuses: fresh
    multi-megabyte tensors per block cost page faults that took longer than the arithmetic.
    """

    def __init__(self, operands: _Operands) -> None:
        o = operands
        kv_heads, _, self.groups, _ = o.query.shape
        scale = o.scale
        self.query_aug = torch.cat([o.query.float().mul_(scale), o.lse.neg().unsqueeze(-1)], dim=-1)
        self.grad_out_aug = torch.cat(
            [o.grad_out_f32.mul(scale), o.delta.mul(-scale).unsqueeze(-1)], dim=-1
        )
        ones = torch.ones((kv_heads, o.key.shape[1], 1), dtype=torch.float32, device=o.key.device)
        self.key_aug = torch.cat([o.key.float(), ones], dim=-1)
        self.value_aug = torch.cat([o.value.float(), ones], dim=-1)
        kinds = (torch.float32, torch.float32, o.query.dtype, o.query.dtype)
        self.buffers = _workspace.take(o.score_numel, kinds, o.query.device)

    def block(
        self, first: int, last: int, masked_from: int, end: int, visible_S_K: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        kv_heads, groups = self.key_aug.shape[0], self.groups
        n = last - first
        probs, grad_scores, probs_c, grad_scores_c = (
            buffer[: kv_heads * n * groups * end].view(kv_heads, n * groups, end)
            for buffer in self.buffers
        )
        query_aug = _rows(self.query_aug, first, last)
        torch.bmm(query_aug, self.key_aug[:, :end].transpose(1, 2), out=probs).exp_()
        if masked_from < end:
            tail = probs.view(kv_heads, n, groups, end)[..., masked_from:]
            tail.masked_fill_(~visible_S_K[first:last, None, masked_from:end], 0.0)
        probs_c.copy_(probs)
        grad_out_aug = _rows(self.grad_out_aug, first, last)
        torch.bmm(grad_out_aug, self.value_aug[:, :end].transpose(1, 2), out=grad_scores)
        grad_scores_c.copy_(grad_scores.mul_(probs))
        return probs_c, grad_scores_c


class _Workspace(threading.local):
    """The score buffers of the blocked backward, kept per thread and grown on demand (the
    Python scores: two float32 and two compute-dtype; the native ones: two compute-dtype)."""

    def __init__(self) -> None:
        self.buffers: tuple[torch.Tensor, ...] = ()

    def take(
        self, numel: int, kinds: tuple[torch.dtype, ...], device: torch.device
    ) -> tuple[torch.Tensor, ...]:
        current = self.buffers
        if (
            len(current) != len(kinds)
            or any(b.dtype != kind for b, kind in zip(current, kinds, strict=True))
            or current[0].numel() < numel
            or current[0].device != device
        ):
            self.buffers = tuple(torch.empty(numel, dtype=kind, device=device) for kind in kinds)
        return self.buffers


_workspace = _Workspace()
