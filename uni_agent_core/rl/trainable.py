"""Which of a policy's weights a trainer updates: all of them, or only its top decoder layers.

`train_top_layers(model, n)` freezes the token embeddings and every decoder layer below the top
`n`; the top `n` layers, the final norm, and an untied LM head stay trainable (a head tied to
the embeddings, as in SmolLM2, stays frozen with them). Autograd then stops at the lowest
trainable layer: the backward pass, two thirds of a step's matmuls, runs over `n` of the
layers, and AdamW keeps state for their weights only. The forward pass still runs every layer,
and the engines serve the whole model as before.
"""

from __future__ import annotations

from typing import Any


def train_top_layers(model: Any, layers: int | None) -> None:
    """Leave only the top `layers` decoder layers (and what follows them) trainable.

    Args:
        model: a `transformers` decoder-only causal LM (`model.base_model.layers`, `.norm`).
        layers: how many of the top decoder layers train; None trains every weight.

    Raises:
        ValueError: `layers` is not between 1 and the model's number of decoder layers, or the
            model does not expose its decoder layers.
    """
    if layers is None:
        return
    decoder = model.base_model
    blocks = getattr(decoder, "layers", None)
    if blocks is None or not hasattr(decoder, "norm"):
        raise ValueError(
            f"{type(model).__name__} does not expose its decoder layers and final norm; "
            "trainable_layers needs a decoder-only model such as Llama, Qwen or SmolLM2"
        )
    if not 1 <= layers <= len(blocks):
        raise ValueError(f"trainable_layers={layers}: the policy has {len(blocks)} decoder layers")
    model.requires_grad_(False)
    for block in blocks[len(blocks) - layers :]:
        block.requires_grad_(True)
    decoder.norm.requires_grad_(True)
    head = model.get_output_embeddings()
    if head is not None and head.weight is not model.get_input_embeddings().weight:
        head.requires_grad_(True)
