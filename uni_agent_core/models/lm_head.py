"""The LM head: float32 logits whatever dtype the decoder body computes in, at bf16 speed.

In bf16 the vocabulary projection is the largest single source of train/infer logprob
mismatch: logits of magnitude 10-30 rounded to bf16 carry up to 0.06 of error, so two kernels
that round differently (the engine's KV-cached decode, the trainer's full forward) disagree on
single tokens (MiniMax-M1 reports the same problem, and an fp32 LM head as its fix).

A float32 head removes that term but costs float32 matmuls: 455 ms of forward and backward per
512 positions of SmolLM2 on these cores, a sixth of a bf16 trainer step. The rounding only
matters where the probability mass is, so `head_logits` projects in the hidden state's dtype
and recomputes the `EXACT_TOP` largest logits of every position in float32 (a 576-wide dot
product each). Every logit the softmax weighs then carries float32 precision, the rest keep a
rounding that their negligible mass makes harmless. On a recorded SmolLM2 step, trainer
logprobs computed this way matched the (float32) engine's with the same Pearson correlation as
a float32 head (0.999884, against 0.999829 with the bf16 head alone).

`head_logprobs` is what a trainer differentiates: the logprobs of given tokens under those
logits, with a backward that runs the two gradient matmuls in the compute dtype (as the rest
of the bf16 backward does) from the softmax of the saved logits.

With float32 hidden states (the exact reference path) both functions are a plain float32
projection.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

EXACT_TOP = 8
"""Largest logits per position recomputed in float32 when the head runs in 16 bits."""


def head_logits(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """Float32 logits `[..., V]` of hidden states `[..., H]` (see the module docstring).

    Args:
        head: the model's output embeddings (an `nn.Linear`, with or without a bias).
        hidden: hidden states of any float dtype; with float32 the projection is plain float32.
    """
    weight, bias = head.weight, getattr(head, "bias", None)
    if hidden.dtype == torch.float32 or bias is not None:
        weight = weight if weight.dtype == torch.float32 else weight.float()
        return F.linear(hidden.float(), weight, None if bias is None else bias.float())
    if isinstance(head, torch.nn.Module) and weight.dtype == hidden.dtype:
        logits = head(hidden).float()  # the module's own forward (an engine's packs its weight)
    else:
        logits = F.linear(hidden, weight.to(hidden.dtype)).float()
    top = logits.topk(min(EXACT_TOP, logits.shape[-1]), dim=-1).indices
    exact = torch.einsum("...h,...kh->...k", hidden.float(), weight[top].float())
    return logits.scatter_(-1, top, exact)


def head_logprobs(
    head: Any, hidden_N_H: torch.Tensor, targets_N: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Float32 `log softmax(head_logits(hidden) / temperature)[target]` per position,
    differentiable with respect to the hidden states and the head's weight."""
    weight, bias = head.weight, getattr(head, "bias", None)
    if hidden_N_H.dtype == torch.float32 or bias is not None:
        logits = head_logits(head, hidden_N_H)
        if temperature != 1.0:
            logits = logits / temperature
        picked = torch.gather(logits, -1, targets_N.unsqueeze(-1)).squeeze(-1)
        return picked - torch.logsumexp(logits, dim=-1)
    return _LowPrecisionHeadLogprobs.apply(hidden_N_H, weight, targets_N, temperature)


class _LowPrecisionHeadLogprobs(torch.autograd.Function):
    """`head_logprobs` of 16-bit hidden states: forward through `head_logits`, backward
    `d logp / d logits = (onehot(target) - softmax) / temperature` through two matmuls in the
    hidden states' dtype."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden_N_H: torch.Tensor,
        weight_V_H: torch.Tensor,
        targets_N: torch.Tensor,
        temperature: float,
    ) -> torch.Tensor:
        head = _Head(weight_V_H)
        logits_N_V = head_logits(head, hidden_N_H)
        if temperature != 1.0:
            logits_N_V.div_(temperature)
        lse_N = torch.logsumexp(logits_N_V, dim=-1)
        picked_N = logits_N_V.gather(-1, targets_N.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(hidden_N_H, weight_V_H, targets_N, logits_N_V, lse_N)
        ctx.temperature = temperature
        return picked_N - lse_N

    @staticmethod
    def backward(ctx: Any, grad_N: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden_N_H, weight_V_H, targets_N, logits_N_V, lse_N = ctx.saved_tensors
        # -softmax * g, then + g at the target: the gradient of the logprob w.r.t. the logits
        grad_logits = logits_N_V.sub_(lse_N.unsqueeze(-1)).exp_().mul_(-grad_N.unsqueeze(-1))
        grad_logits.scatter_add_(-1, targets_N.unsqueeze(-1), grad_N.unsqueeze(-1))
        if ctx.temperature != 1.0:
            grad_logits.div_(ctx.temperature)
        grad_logits = grad_logits.to(hidden_N_H.dtype)
        grad_hidden = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_hidden = grad_logits @ weight_V_H.to(hidden_N_H.dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = (grad_logits.t() @ hidden_N_H).to(weight_V_H.dtype)
        return grad_hidden, grad_weight, None, None


class _Head:
    """A bias-free head around a bare weight (what `head_logits` reads)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.bias = None
