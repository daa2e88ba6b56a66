"""Native CPU kernels of the trainer, compiled on the machine that runs them.

One kernel today, `kernels/attention_scores.cpp`: the score block of the bf16 attention
backward (`blocked_attention_grad.py`). PyTorch has no CPU matmul with bf16 operands and a
float32 result (`torch.mm(..., out_dtype=)` is CUDA-only), so the Python path of that backward
computes its two score products in float32, at a tenth of the bf16 rate of a CPU with AMX
(measured here: 355 against 3,200 GFLOP/s), and then passes over each block's scores four more
times (exp, mask, softmax correction, bf16 copies). The kernel calls oneDNN's brgemm with bf16
operands and float32 accumulators, as PyTorch's own CPU flash attention does, and applies the
exp and the correction while a tile is in cache. Its arithmetic is the Python path's: the
operands are bf16 values either way, and both accumulate in float32.

`attention_scores_ops()` builds it once per machine with `torch.utils.cpp_extension` (ninja and
the system C++ compiler) into `$AGENT_RL_CACHE/kernels/<key>/`, the key naming the torch
version, the source and the CPU (it is compiled for the CPU it runs on); concurrent processes
share one build through the extension builder's file lock. `make setup` builds it
(`python -m uni_agent_core.models.cpu_kernels`), and so does a first use. It returns None,
with the reason logged once, where the kernel cannot run: a CPU without AVX-512 or without
AMX (oneDNN packs bf16 for brgemm only with AMX), no compiler, or `AGENT_RL_CPU_KERNELS=0`;
the caller then keeps its Python path.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import sys
from importlib import resources
from typing import Any

from uni_agent_core.errors import AgentRLError
from uni_agent_core.host_cpu import NATIVE_PATHS_VARIABLE, cpu_identity, first_line
from uni_agent_core.models.registry import cache_root

LOG = logging.getLogger(__name__)

SOURCE = "attention_scores.cpp"
EXTENSION = "agent_rl_cpu"
"""The extension's library name and its operator namespace (`torch.ops.agent_rl_cpu`)."""
DISABLE_VARIABLE = NATIVE_PATHS_VARIABLE
"""Set to 0 to keep every caller on its Python path (and every other native fast path off)."""


class KernelUnavailable(AgentRLError):
    """The native kernels cannot run here; the message says why."""


@functools.cache
def attention_scores_ops() -> Any | None:
    """The kernel's operators (`torch.ops.agent_rl_cpu`), built if needed; None where they cannot
    run here (the reason is logged once)."""
    try:
        return _load()
    except KernelUnavailable as reason:
        LOG.info("native attention kernel off, the Python path runs: %s", reason)
        return None


def _load() -> Any:
    import torch

    if os.environ.get(DISABLE_VARIABLE, "1") == "0":
        raise KernelUnavailable(f"{DISABLE_VARIABLE}=0")
    if platform.machine() != "x86_64" or torch.backends.cpu.get_cpu_capability() != "AVX512":
        raise KernelUnavailable(
            f"needs an x86-64 CPU with AVX-512 (this one: {platform.machine()}, "
            f"{torch.backends.cpu.get_cpu_capability()})"
        )
    if not torch.backends.mkldnn.is_available():
        raise KernelUnavailable("this torch build has no oneDNN")
    _build(torch)
    ops = torch.ops.agent_rl_cpu
    if not ops.available():
        raise KernelUnavailable("oneDNN cannot pack bf16 for brgemm on this CPU (no AMX)")
    return ops


def _build(torch: Any) -> None:
    from torch.utils import cpp_extension

    source = resources.files("uni_agent_core.models").joinpath("kernels", SOURCE)
    text = source.read_bytes()
    directory = cache_root() / "kernels" / _build_key(torch.__version__, text)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load(
            name=EXTENSION,
            sources=[str(source)],
            # at::vec takes its AVX-512 implementation from these macros (PyTorch compiles each
            # kernel once per capability the same way); -march=native: the CPU that runs it.
            extra_cflags=[
                "-O3",
                "-march=native",
                "-DCPU_CAPABILITY_AVX512",
                "-DCPU_CAPABILITY=AVX512",
            ],
            build_directory=str(directory),
            is_python_module=False,
            verbose=False,
        )
    except (RuntimeError, OSError, ImportError) as exc:
        raise KernelUnavailable(f"building {SOURCE} failed: {first_line(exc)}") from exc


def _build_key(torch_version: str, source: bytes) -> str:
    digest = hashlib.sha256(source)
    digest.update(torch_version.encode())
    digest.update(cpu_identity().encode())
    return f"{EXTENSION}-{digest.hexdigest()[:16]}"


def main() -> int:
    """`python -m uni_agent_core.models.cpu_kernels`: build the kernels and say whether they
    run here (`make setup` calls it; exit 0 either way, since the Python path is complete)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ops = attention_scores_ops()
    if ops is not None:
        print("native attention kernel: built, runs on this CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
