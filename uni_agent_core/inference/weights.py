"""Loading policy weights into a live model: from a state dict or safetensors files.

Used by engines on `update_weights` (and by anything else that swaps a policy's weights in
place); the model object, its KV-cache layout and its device placement stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch


def load_weights(model: Any, state: Mapping[str, torch.Tensor] | str | Path) -> None:
    """Copy `state` into `model`'s parameters, requiring the names to match.

    Args:
        model: a `transformers` model (or any `nn.Module`).
        state: a state dict, or a safetensors file, or a directory of them
            (what `save_pretrained` writes).

    Raises:
        ValueError: names missing from or unknown to the model (a tied `lm_head.weight` may be
            absent: it is the embedding matrix).
    """
    if isinstance(state, (str, Path)):
        state = read_safetensors(Path(state))
    with torch.no_grad():
        missing, unexpected = model.load_state_dict(dict(state), strict=False)
    if getattr(model.config, "tie_word_embeddings", False):
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ValueError(
            f"update_weights: state dict does not match the model "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file or of every `*.safetensors` file in a directory."""
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"update_weights: no *.safetensors at {path}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state
