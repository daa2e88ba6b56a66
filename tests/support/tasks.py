"""Task-set helpers for envs/curriculum tests: a small micro-swe dataset and a fresh-sandbox
factory (bubblewrap where it exists, an unisolated scratch directory otherwise)."""

from __future__ import annotations

import shutil
from pathlib import Path

from uni_agent_core.config.sandbox import LocalSandboxConfig
from uni_agent_core.envs.micro_swe.generator import generate, write_dataset
from uni_agent_core.envs.sources import load_task_file
from uni_agent_core.envs.verifier import SandboxFactory, task_sandbox_factory
from uni_agent_core.types import TaskSpec


def sandbox_config() -> LocalSandboxConfig:
    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    return LocalSandboxConfig(isolation=isolation, exec_timeout_s=60, wall_clock_s=300)


def sandbox_factory() -> SandboxFactory:
    return task_sandbox_factory(sandbox_config())


TEST_KEY = "agent-rl-tests-" + "0" * 32
"""The micro-swe key of test datasets (tests need not hide their answers)."""


def micro_swe_tasks(root: Path, n: int = 4, seed: int = 0, split: str = "train") -> list[TaskSpec]:
    """`n` generated tasks (levels L0..L3 in turn), written under `root` and loaded back."""
    write_dataset(generate(n, seed, split=split, key=TEST_KEY), root, key=TEST_KEY)
    return load_task_file(root)
