"""The LM head in float32, whatever dtype the decoder body computes in.

In bf16 the vocabulary projection is the largest single source of train/infer logprob
mismatch: logits of magnitude 10-30 carry bf16's ~0.4% relative rounding, so two kernels that
round differently (the engine's KV-cached decode, the trainer's full forward) disagree by up to
a few tenths of a nat on single tokens. Projecting the (bf16) hidden state with a float32 copy
of the head weight in both the engine and the trainer removes that term (MiniMax-M1 reports
the same fix, an fp32 LM head, for its RL train/infer mismatch). The body keeps bf16's speed;
the head is a small share of the compute (the trainer runs it at loss positions only, the engine
at the last position).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def float32_logits(
    head: Any, hidden: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """`head(hidden)` computed in float32.

    Args:
        head: the model's output embeddings (an `nn.Linear`).
        hidden: hidden states `[..., H]` of any float dtype.
        weight: a float32 copy of `head.weight` to use instead of casting it on each call (an
            engine keeps one; a trainer casts, so that the gradient reaches the weight).

    Returns:
        Float32 logits `[..., V]`.
    """
    weight = head.weight if weight is None else weight
    bias = getattr(head, "bias", None)
    return F.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
