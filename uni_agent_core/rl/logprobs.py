"""Per-token log-probabilities from a causal LM, with the vocabulary projection done in chunks.

A full `[B, T, V]` logits tensor of `smollm2-135m` (V = 49,152) at T = 8K is 1.6 GB in fp32 per
row; the trainer never builds it. The decoder runs once to hidden states, then the LM head and
`log_softmax` run over `chunk_tokens` positions at a time (each chunk is checkpointed when
gradients are needed, so its logits are recomputed in the backward pass instead of stored).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from uni_agent_core.models.lm_head import head_logprobs


def decoder_and_head(model: Any) -> tuple[Any, Any]:
    head = model.get_output_embeddings()
    decoder = getattr(model, "base_model", None)
    if head is None or decoder is None or decoder is model:
        raise TypeError(f"{type(model).__name__} exposes no decoder/LM head to split the logits")
    return decoder, head


def chunk_logprobs(
    head: Any, hidden_B_C_H: torch.Tensor, targets_B_C: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Float32 logprobs of `targets` (any leading shape) under the head (`lm_head.py`)."""
    shape = targets_B_C.shape
    flat = head_logprobs(
        head, hidden_B_C_H.reshape(-1, hidden_B_C_H.shape[-1]), targets_B_C.reshape(-1), temperature
    )
    return flat.view(shape)


def token_logprobs(
    model: Any,
    input_ids_B_T: torch.Tensor,
    attention_mask_B_T: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 512,
) -> torch.Tensor:
    """`logprobs[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`; position 0 gets 0.0.

    Args:
        model: a Hugging Face causal LM (decoder as `base_model`, head as output embeddings).
        input_ids_B_T: right-padded token ids.
        attention_mask_B_T: 1 on real tokens.
        temperature: the sampling temperature the engine used (1.0 for RL).
        chunk_tokens: positions projected onto the vocabulary at once.

    Returns:
        Float32 tensor `[B, T]`, differentiable when grad is enabled.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    decoder, head = decoder_and_head(model)
    hidden = decoder(input_ids=input_ids_B_T, attention_mask=attention_mask_B_T).last_hidden_state
    hidden, targets = hidden[:, :-1], input_ids_B_T[:, 1:]
    pieces = []
    for start in range(0, targets.shape[1], chunk_tokens):
        end = start + chunk_tokens
        if torch.is_grad_enabled():
            piece = checkpoint(
                chunk_logprobs,
                head,
                hidden[:, start:end],
                targets[:, start:end],
                temperature,
                use_reentrant=False,
            )
        else:
            piece = chunk_logprobs(head, hidden[:, start:end], targets[:, start:end], temperature)
        pieces.append(piece)
    first = torch.zeros((input_ids_B_T.shape[0], 1), dtype=torch.float32, device=hidden.device)
    return torch.cat([first, *pieces], dim=1)
