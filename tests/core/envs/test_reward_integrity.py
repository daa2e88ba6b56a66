"""Playing the attacker: from inside a micro-swe task's sandbox, nothing recovers the answers.

A second agent-rl install is placed on the host where the old deny-list sandbox showed it (under
`/opt`, under the user's home, and as a system-wide package under `/usr/local`, a directory the
sandbox does bind). From the agent's sandbox of a generated task, the attacker lists and
searches the file system, reads `/proc`, imports agent-rl and runs its generator with the task's
seed. None of it may yield the gold patch, the hidden tests, the dataset or its key.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import uni_agent_core
from uni_agent_core.config.sandbox import LocalSandboxConfig
from uni_agent_core.config.tasks import MicroSweTasksConfig
from uni_agent_core.envs.leak_audit import LeakKind, audit_commands
from uni_agent_core.envs.sources import load_tasks, micro_swe_dir
from uni_agent_core.envs.verifier import task_sandbox_factory
from uni_agent_core.envs.workspace import prepare_agent_workspace
from uni_agent_core.types import TaskSpec

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

PACKAGE = Path(uni_agent_core.__file__).parent


def _install_copy(parent: Path) -> Path | None:
    """A copy of agent-rl's package under `parent` (None where the host does not let us)."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(PACKAGE, parent / "uni_agent_core", ignore=shutil.ignore_patterns("*.pyc"))
    except OSError:
        return None
    return parent


SYSTEM_PYTHON = Path("/usr/bin/python3")
"""The interpreter micro-swe tests run with inside the sandbox."""


def _system_site() -> Path | None:
    """The first site directory of the system's Python (a `pip install` lands there)."""
    if not SYSTEM_PYTHON.exists():
        return None
    code = "import site; print(site.getsitepackages()[0])"
    done = subprocess.run([SYSTEM_PYTHON, "-c", code], capture_output=True, text=True)
    site = Path(done.stdout.strip())
    return site if done.returncode == 0 and site.is_dir() else None


@pytest.fixture
def second_installs() -> Iterator[list[Path]]:
    """agent-rl's package copied under /opt, the home directory and the system site directory
    (the roots on `PYTHONPATH` that make each copy importable)."""
    tag = uuid.uuid4().hex[:8]
    candidates = [Path(f"/opt/agent-rl-{tag}"), Path.home() / f"agent-rl-{tag}"]
    placed = [path for path in map(_install_copy, candidates) if path is not None]
    site = _system_site()
    if site is not None and not (site / "uni_agent_core").exists() and _install_copy(site):
        placed.append(site)
    try:
        yield placed
    finally:
        for path in placed:
            shutil.rmtree(path / "uni_agent_core" if path == site else path)


ATTACKS = [
    "ls -la / /opt /root /home /work /usr/local/lib/python3*/*-packages 2>&1",
    "find / \\( -path /proc -o -path /sys \\) -prune -o \\( -name uni_agent_core -o "
    "-name tasks.jsonl -o -name '*.key' -o -name 'agent-rl*' -o -name test_patch \\) -print "
    "2>/dev/null",
    "cat /proc/1/cmdline /proc/*/cmdline /proc/*/environ 2>/dev/null | tr '\\0' '\\n'",
    "cat /proc/self/mountinfo",
    "python3 -c 'import uni_agent_core.envs.micro_swe.generator as g; print(g.__file__)' 2>&1",
    "for d in /opt/* /root/* /home/* $HOME/* /usr/local/lib/python3*/*-packages; do "
    "PYTHONPATH=$d python3 -m uni_agent_core.cli data generate micro-swe --n 1 --seed 0 "
    "--out /tmp/regen 2>&1; done; cat /tmp/regen/tasks.jsonl 2>&1",
    "agent-rl data generate micro-swe --n 1 --seed 0 --out /tmp/regen2 2>&1",
    f"{sys.executable} -m uni_agent_core.cli data generate micro-swe --n 1 --out /tmp/r3 2>&1",
]


def _added_lines(patch: str) -> list[str]:
    return [
        line[1:].strip()
        for line in patch.splitlines()
        if line.startswith("+") and not line.startswith("+++") and len(line.strip()) > 12
    ]


async def _attack(task: TaskSpec, sandbox_config: LocalSandboxConfig) -> str:
    async with task_sandbox_factory(sandbox_config)(task) as sandbox:
        await prepare_agent_workspace(sandbox, task)
        outputs = []
        for command in ATTACKS:
            result = await sandbox.exec(command, timeout=120)
            outputs.append(f"$ {command}\n{result.stdout}{result.stderr}")
        return "\n".join(outputs)


def test_no_command_in_the_sandbox_recovers_the_answers(
    tmp_path: Path, second_installs: list[Path]
) -> None:
    assert second_installs, "no second install could be placed on this host"
    for install in second_installs:  # the copies are real: the host can run their generator
        probe = [sys.executable, "-c", "import uni_agent_core.envs.micro_swe.generator"]
        done = subprocess.run(probe, env={"PYTHONPATH": str(install)}, capture_output=True)
        assert done.returncode == 0, done.stderr
    site = _system_site()
    cache = tmp_path / "cache"
    config = MicroSweTasksConfig(n=1, seed=0, levels=["L0"])
    (task,) = load_tasks(config, cache=cache)
    dataset = micro_swe_dir(config, cache)

    seen = asyncio.run(_attack(task, LocalSandboxConfig(exec_timeout_s=120, wall_clock_s=600)))

    secrets = [*_added_lines(task.patch), *_added_lines(task.test_patch)]
    assert secrets, "the task has no answer to protect"
    leaked = [line for line in secrets if line in seen]
    assert leaked == [], f"answer lines visible in the sandbox: {leaked[:3]}\n{seen[-4000:]}"
    named = [dataset, cache, PACKAGE, *(path for path in second_installs if path != site)]
    for host_path in map(str, named):
        assert host_path not in seen, f"{host_path} is named inside the sandbox:\n{seen[-4000:]}"
    assert "uni_agent_core/__init__.py" not in seen
    assert "No module named 'uni_agent_core" in seen
    assert "FAIL_TO_PASS" not in seen

    findings = {finding.kind for finding in audit_commands(ATTACKS).findings}
    assert {LeakKind.TASK_GENERATOR, LeakKind.DATASET_READ} <= findings
