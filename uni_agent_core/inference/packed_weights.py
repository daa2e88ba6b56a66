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

oneDNN packs bf16 only on CPUs with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT; an AVX2-only CPU
(most laptops, AMD before Zen 4) raises. `packing_supported()` tries once per process and, where
packing cannot run (or `AGENT_RL_CPU_KERNELS=0` keeps every native fast path off), logs the
reason once; `pack_linear_weights` then packs nothing and every layer keeps PyTorch's plain bf16
kernel: the same values.
"""

from __future__ import annotations

import functools
import logging
import os
import types
from typing import Any, cast

import torch
import torch.nn.functional as F

from uni_agent_core.host_cpu import NATIVE_PATHS_VARIABLE, first_line

LOG = logging.getLogger(__name__)

DECODE_ROWS = 16
"""The batch size oneDNN is told to pack for (a decode batch; other sizes run as well)."""


FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Sibling projections of one input (a Llama-style attention, MLP) packed as one matrix."""


def pack_linear_weights(model: torch.nn.Module) -> int:
    """Pack the weights of `model`'s bf16 linear layers on a CPU; returns how many (0 when
    packing cannot run here, `packing_supported()`, or the model is not a bf16 CPU model).

    Sibling projections of one input (`FUSED`) are packed as one matrix and computed by one
    call: the first sibling's forward computes all of them and hands the others their columns
    when they are called with the same input (as the attention and the MLP do). One 960-wide
    call instead of three (q, k, v) and one 3,072-wide instead of two (gate, up) took 170 us a
    SmolLM2 layer against 234 us, with the same values bit for bit.
    """
    if not any(_packable(p) for p in model.parameters()) or not packing_supported():
        return 0
    # The packed state and forward are set on each layer instance, on purpose: torch types
    # `Module.__setattr__` for tensors and submodules only, and mypy forbids assigning a method.
    packed = 0
    for parent in model.modules():
        for names in FUSED:
            found = [getattr(parent, name, None) for name in names]
            layers = [layer for layer in found if isinstance(layer, torch.nn.Linear)]
            if len(layers) == len(names) and all(_fusable(layer, layers[0]) for layer in layers):
                fused = _FusedProjections(layers)
                for index, layer in enumerate(layers):
                    layer._packed_weight = fused  # type: ignore[assignment]
                    layer._fused_index = index  # type: ignore[assignment]
                    layer.forward = types.MethodType(_fused_linear_forward, layer)  # type: ignore[method-assign]
                packed += len(layers)
    for module in model.modules():
        if (
            isinstance(module, torch.nn.Linear)
            and _packable(module.weight)
            and not packed_module(module)
        ):
            module._packed_weight = _PackedWeight(module.weight)  # type: ignore[assignment]
            module.forward = types.MethodType(_packed_linear_forward, module)  # type: ignore[method-assign]
            packed += 1
    return packed


@functools.cache
def packing_supported() -> bool:
    """True when oneDNN can pack bf16 linear weights on this CPU (tried once per process); else
    the reason is logged once and layers keep the plain bf16 kernel."""
    reason = _packing_unavailable()
    if reason is not None:
        LOG.info("bf16 weight packing off, plain bf16 linear layers run: %s", reason)
    return reason is None


def _packing_unavailable() -> str | None:
    """Why packing cannot run here, or None when it can."""
    if os.environ.get(NATIVE_PATHS_VARIABLE, "1") == "0":
        return f"{NATIVE_PATHS_VARIABLE}=0"
    if not torch.backends.mkldnn.is_available():
        return "this PyTorch build has no oneDNN"
    try:
        with torch.no_grad():
            torch.ops.mkldnn._reorder_linear_weight(
                torch.zeros(DECODE_ROWS, DECODE_ROWS, dtype=torch.bfloat16), DECODE_ROWS
            )
    except RuntimeError as exc:  # an AVX2-only CPU: "bf16 path needs the cpu support ..."
        return first_line(exc)
    return None


def _fusable(layer: Any, first: Any) -> bool:
    return (
        isinstance(layer, torch.nn.Linear)
        and layer.bias is None
        and _packable(layer.weight)
        and layer.in_features == first.in_features
        and not packed_module(layer)
    )


def _packable(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and weight.dim() == 2


class _PackedWeight:
    """A packed copy of one weight, and what it was packed from. A deep copy of its layer
    (`copy.deepcopy` of the model) gets None and computes with the plain kernel: the same
    values."""

    def __deepcopy__(self, memo: dict) -> None:
        return None

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
    # `pack_linear_weights` set it before binding this forward (a deep copy holds None).
    state = cast("_PackedWeight | None", self._packed_weight)
    packed = None if state is None or not _packed_call(self, x) else state.refresh(self.weight)
    if packed is None:
        return F.linear(x, self.weight, self.bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")


def _packed_call(layer: torch.nn.Linear, x: torch.Tensor) -> bool:
    """True when `layer(x)` may use a packed weight: no gradient to compute, matching dtypes."""
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or layer.weight.requires_grad)
    return not needs_grad and x.dtype == layer.weight.dtype


class _FusedProjections:
    """Sibling projections packed as one matrix; the first one's forward computes them all
    (a deep copy of the model gets None, as with `_PackedWeight`)."""

    def __deepcopy__(self, memo: dict) -> None:
        return None

    def __init__(self, layers: list[torch.nn.Linear]) -> None:
        self.layers = layers
        self.widths = [layer.out_features for layer in layers]
        self.sources: list[torch.Tensor] = []
        self.states: list[tuple[int, int]] = []
        self.packed: torch.Tensor | None = None
        self._input: torch.Tensor | None = None
        self._pending: dict[int, torch.Tensor] = {}

    def refresh(self) -> torch.Tensor | None:
        """The packed matrix, packed again if any weight changed (see `_PackedWeight`)."""
        weights = [layer.weight for layer in self.layers]
        if not all(_packable(w) for w in weights):
            return None
        states = [(w._version, w.data_ptr()) for w in weights]
        same = len(self.sources) == len(weights) and all(
            a is b for a, b in zip(self.sources, weights, strict=True)
        )
        if not same or states != self.states:
            with torch.no_grad():
                stacked = torch.cat([w.detach() for w in weights])
                self.packed = torch.ops.mkldnn._reorder_linear_weight(stacked, DECODE_ROWS)
            self.sources, self.states = weights, states
        return self.packed

    def first(self, layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """The first sibling's `layer(x)`; the others' products wait for them."""
        self._input, self._pending = None, {}
        packed = self.refresh() if _packed_call(layer, x) else None
        if packed is None:
            return F.linear(x, layer.weight, layer.bias)
        outs = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "").split(
            self.widths, dim=-1
        )
        # The siblings get copies: a view would keep the whole stacked product alive as long
        # as it lives, and a value projection lives on in the KV and prefix caches (5x the
        # memory of its own columns for SmolLM2's q/k/v).
        self._input = x
        self._pending = {i: out.contiguous() for i, out in enumerate(outs[1:], start=1)}
        return outs[0]

    def take(self, index: int, x: torch.Tensor) -> torch.Tensor | None:
        """Sibling `index`'s product of `x` if the first sibling computed it, else None."""
        if self._input is not x or index not in self._pending:
            return None
        out = self._pending.pop(index)
        if not self._pending:
            self._input = None
        return out


def _fused_linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    # `pack_linear_weights` set both before binding this forward (a deep copy holds None).
    fused = cast("_FusedProjections | None", self._packed_weight)
    if fused is not None:
        index = cast(int, self._fused_index)
        if index == 0:
            return fused.first(self, x)
        out = fused.take(index, x)
        if out is not None:
            return out
    return F.linear(x, self.weight, self.bias)


def packed_module(module: Any) -> bool:
    """True when `module`'s forward uses a packed weight (its own or its siblings')."""
    return isinstance(getattr(module, "_packed_weight", None), _PackedWeight | _FusedProjections)
