"""Mixed precision for the embedded trainer: low-precision compute, float32 master weights.

With `policy.dtype: bfloat16` (or `float16`) the trainer keeps the policy it was given as the
**master** model, in float32: the optimizer steps its parameters, its state is float32, and
checkpoints save it. A `ComputeCopy` holds the same weights cast to the compute dtype; every
forward and backward of a step runs on that copy, so the matmuls (and the rest of the decoder)
run in bf16, the regime the engines sample in. After the backward pass the copy's gradients
are cast into the master's `.grad`, the optimizer steps the master, and `refresh()` casts the
new master weights back into the copy. The engines load the copy's state: their weights are
then bit-identical to what the trainer computes with, and what remains of the train/infer
mismatch (batching, KV-cache kernels) is what truncated importance sampling corrects.

With `float32` the copy *is* the master (no second model, no casts): the exact reference path
that the gradient-equality tests use.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import torch

ComputeDtype = Literal["float32", "bfloat16", "float16"]


class ComputeCopy:
    """The model a trainer computes with, tied to the float32 master the optimizer steps."""

    def __init__(self, master: Any, dtype: ComputeDtype) -> None:
        """Args:
        master: the trained model; it is cast to float32 in place if it is not already.
        dtype: the compute dtype (`float32`: the master itself computes).
        """
        self.master = master
        self.dtype: torch.dtype = getattr(torch, dtype)
        if any(p.dtype != torch.float32 for p in master.parameters()):
            master.float()
        if self.dtype == torch.float32:
            self.model = master
        else:
            self.model = copy.deepcopy(master).to(self.dtype)
        self._pairs = list(zip(master.parameters(), self.model.parameters(), strict=True))

    @property
    def mixed(self) -> bool:
        """True when compute runs in a lower precision than the master weights."""
        return self.model is not self.master

    def grads_to_master(self) -> None:
        """Cast the compute copy's gradients into the master's `.grad` (a no-op at float32)."""
        if not self.mixed:
            return
        for master, compute in self._pairs:
            if compute.grad is None:
                master.grad = None
            else:
                master.grad = compute.grad.float()
                compute.grad = None

    def zero_grad(self) -> None:
        """Drop the compute copy's gradients (the optimizer drops the master's)."""
        if self.mixed:
            self.model.zero_grad(set_to_none=True)

    def refresh(self) -> None:
        """Cast the master's weights into the compute copy (after a step or a restore)."""
        if not self.mixed:
            return
        with torch.no_grad():
            for master, compute in self._pairs:
                compute.copy_(master)
