"""oneDNN-packed bf16 weights for an engine's linear layers on a CPU.

A bf16 `F.linear` on a CPU runs oneDNN, which reorders the weight into its blocked layout on
every call. At decode sizes (16 rows) that reorder is a large share of the call: on these cores
one SmolLM2 layer's seven projections took 417 us a decode step from plain bf16 weights and
297 us from weights packed once (`torch.ops.mkldnn._reorder_linear_weight`), the LM head 2.2 ms
against 1.4 ms. The results are bit-identical (the same oneDNN kernel, without the reorder), so
an engine that packs computes exactly what the trainer's unpacked forward computes.

`pack_linear_weights(model)` gives every bf16 `nn.Linear` of a CPU model a packed copy of its
weight, used when no gradient is needed. The copy follows the weight: it is packed again when
the parameter is replaced, changed in place (`load_state_dict` copies into it, which bumps its
version) or given new storage, so `update_weights` needs no hook. It costs the linear weights'
memory once more. float32 keeps PyTorch's own kernel (MKL), the exact reference, whose results
packing would change in the last bits.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

DECODE_ROWS = 16
"""The batch size oneDNN is told to pack for (a decode batch; other sizes run as well)."""


def pack_linear_weights(model: torch.nn.Module) -> int:
    """Pack the weights of `model`'s bf16 linear layers on a CPU; returns how many (0 when
    this PyTorch build has no oneDNN or the model is not a bf16 CPU model)."""
    if not torch.backends.mkldnn.is_available():
        return 0
    packed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and _packable(module.weight):
            module._packed_weight = _PackedWeight(module.weight)
            module.forward = types.MethodType(_packed_linear_forward, module)
            packed += 1
    return packed


def _packable(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and weight.dim() == 2


class _PackedWeight:
    """A packed copy of one weight, and what it was packed from."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.source: torch.Tensor | None = None
        self.state: tuple[int, int] = (-1, 0)
        """The source's version and storage address when it was packed."""
        self.packed: torch.Tensor | None = None
        self.refresh(weight)

    def refresh(self, weight: torch.Tensor) -> torch.Tensor | None:
        """The packed weight, packed again if `weight` is another tensor or has changed; None
        when `weight` can no longer be packed (another dtype or device)."""
        if not _packable(weight):
            return None
        state = (weight._version, weight.data_ptr())
        if weight is self.source and state == self.state:
            return self.packed
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), DECODE_ROWS)
        self.source, self.state = weight, state
        return self.packed


def _packed_linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
    packed = (
        None
        if needs_grad or x.dtype != self.weight.dtype
        else self._packed_weight.refresh(self.weight)
    )
    if packed is None:
        return F.linear(x, self.weight, self.bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")


def packed(module: Any) -> bool:
    """True when `module`'s forward uses a packed weight."""
    return isinstance(getattr(module, "_packed_weight", None), _PackedWeight)
