"""What a published result needs to be reproduced: code, libraries, hardware, data, command.

`reproducibility_record(recipe, tasks)` gathers the git commit (and whether the tree was dirty),
the versions of agent-rl, torch, transformers, verl, vLLM (when installed), swebench and Python,
the work pool and the hardware topology of the trainer and rollout pools, the inference engine
with its version (asked of the servers themselves when they are remote), a content hash of the
task rows used, and the launch command; the training run logs it as MLflow params under `repro.`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import urllib.request
from collections.abc import Sequence

from uni_agent_core import PROJECT_ROOT
from uni_agent_core.config.inference import EngineConfig, OpenAIServerEngineConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.types import TaskSpec

POOL_ENV = "AGENT_RL_POOL"
"""Environment variable naming the Prefect work pool a run executes on (set by its job
variables in `prefect.yaml`)."""

_PACKAGES = ("agent-rl", "torch", "transformers", "verl", "vllm", "swebench", "prefect", "mlflow")


def dataset_sha256(tasks: Sequence[TaskSpec]) -> str:
    """Content hash of the task rows (order-independent)."""
    digest = hashlib.sha256()
    for row in sorted(task.model_dump_json() for task in tasks):
        digest.update(row.encode())
    return digest.hexdigest()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
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


def topology(recipe: Recipe) -> dict[str, str]:
    """Where training and rollout run: device kind and count per pool."""
    backend = recipe.trainer.backend
    if backend.type == "verl":
        trainer = f"{backend.nnodes} node(s) x {backend.n_gpus_per_node} {backend.device}"
        pool = backend.rollout
        rollout = (
            f"{pool.nnodes} node(s) x {pool.n_gpus_per_node} {backend.device} "
            f"(tp {pool.tensor_parallel_size})"
            if pool.nnodes
            else "colocated with the trainer"
        )
    else:
        trainer = f"1 host, device {backend.device}, {os.cpu_count()} CPUs, {_accelerators()}"
        rollout = "in-process on the trainer host" if recipe.engine.type == "hf" else "remote"
    if recipe.engine.type == "openai_server" and recipe.engine.base_urls:
        rollout = f"{len(recipe.engine.base_urls)} {recipe.engine.api} server(s)"
    return {"trainer": trainer, "rollout": rollout}


def _server_version(engine: OpenAIServerEngineConfig, url: str) -> str:
    path = "/version" if engine.api == "vllm" else "/get_server_info"
    try:
        with urllib.request.urlopen(url + path, timeout=3) as reply:
            return str(json.loads(reply.read()).get("version", "unknown"))
    except (OSError, ValueError):
        return "unreachable"


def engine_version(engine: EngineConfig) -> str:
    """The inference engine and its version: the HF engine's transformers, or what each
    remote server reports (`/version` for vLLM, `/get_server_info` for SGLang)."""
    if engine.type == "hf":
        return f"hf (transformers {_version('transformers')}, torch {_version('torch')})"
    if not engine.base_urls:
        return f"{engine.api} {_version(engine.api)} (servers launched by the trainer)"
    versions = sorted({_server_version(engine, url) for url in engine.base_urls})
    return f"{engine.api} {', '.join(versions)}"


def reproducibility_record(
    recipe: Recipe, tasks: Sequence[TaskSpec], *, command: str | None = None
) -> dict[str, str]:
    """The record, as flat string values; `command` is what started the run (the Prefect
    deployment run of a flow), this process's own command line when None."""
    status = _git("status", "--porcelain")
    record = {
        "git_commit": _git("rev-parse", "HEAD") or "unknown",
        "git_dirty": "unknown" if status is None else str(bool(status)).lower(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": str(os.cpu_count()),
        "accelerators": _accelerators(),
        "pool": os.environ.get(POOL_ENV, "none (run outside a work pool)"),
        "engine": engine_version(recipe.engine),
        "dataset_sha256": dataset_sha256(tasks),
        "dataset_rows": str(len(tasks)),
        "command": command or " ".join(sys.argv),
    }
    record.update({f"topology.{pool}": where for pool, where in topology(recipe).items()})
    record.update({f"version.{name}": _version(name) for name in _PACKAGES})
    return record
