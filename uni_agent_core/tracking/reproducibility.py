"""What a published result needs to be reproduced: code, libraries, hardware, data, command.

`reproducibility_record(tasks)` gathers the git commit (and whether the tree was dirty), the
versions of agent-rl, torch, transformers, verl, vLLM (when installed), swebench and Python,
the host's CPU count and accelerators, a content hash of the task rows used, and the launch
command; the training run logs it as MLflow params under `repro.`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from uni_agent_core.types import TaskSpec

_PACKAGES = ("agent-rl", "torch", "transformers", "verl", "vllm", "swebench", "prefect", "mlflow")


def dataset_sha256(tasks: Sequence[TaskSpec]) -> str:
    """Content hash of the task rows (order-independent)."""
    digest = hashlib.sha256()
    for row in sorted(task.model_dump_json() for task in tasks):
        digest.update(row.encode())
    return digest.hexdigest()


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _accelerators() -> str:
    import torch

    if torch.cuda.is_available():
        names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
        return f"cuda x{torch.cuda.device_count()} ({', '.join(sorted(names))})"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return f"npu x{npu.device_count()}"
    return "none"


def reproducibility_record(tasks: Sequence[TaskSpec]) -> dict[str, str]:
    """The record, as flat string values."""
    status = _git("status", "--porcelain")
    record = {
        "git_commit": _git("rev-parse", "HEAD") or "unknown",
        "git_dirty": "unknown" if status is None else str(bool(status)).lower(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": str(os.cpu_count()),
        "accelerators": _accelerators(),
        "dataset_sha256": dataset_sha256(tasks),
        "dataset_rows": str(len(tasks)),
        "command": " ".join(sys.argv),
    }
    record.update({f"version.{name}": _version(name) for name in _PACKAGES})
    return record
