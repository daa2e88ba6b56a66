"""The sweep of dead runs' debris: sandbox directories and cgroups whose owner pid is dead go,
a live owner's (this process's included) stay, and nothing outside them is touched."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from uni_agent_core.sandbox.limits import Cgroup, join_argv
from uni_agent_core.sandbox.local import SANDBOX_DIR_PREFIX
from uni_agent_core.sandbox.sweep import owner_alive, sweep_dead_runs


def _sandbox_dir(root: Path, pid: int) -> Path:
    path = root / f"{SANDBOX_DIR_PREFIX}{pid}-{uuid.uuid4().hex[:8]}"
    (path / "workspace" / "repo").mkdir(parents=True)
    (path / "workspace" / "repo" / "a.py").write_text("x = 1\n")
    return path


def test_owner_alive_tells_live_from_dead_and_zombie(dead_pid: int, live_pid: int) -> None:
    assert owner_alive(os.getpid()) and owner_alive(live_pid)
    assert not owner_alive(dead_pid)
    zombie = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        assert not owner_alive(zombie.pid)  # killed but not reaped: its sandboxes are orphans
    finally:
        zombie.wait()


def test_sweep_removes_dead_owners_directories_only(
    tmp_path: Path, dead_pid: int, live_pid: int
) -> None:
    root = tmp_path / "sandboxes"
    root.mkdir()
    dead = [_sandbox_dir(root, dead_pid), _sandbox_dir(root, dead_pid)]
    # a sandboxed command took write permission off a directory; the sweep still removes it
    (dead[0] / "workspace" / "repo").chmod(0o500)
    live, own = _sandbox_dir(root, live_pid), _sandbox_dir(root, os.getpid())
    unrelated = root / "agent-rl-sandbox-notapid-x"
    unrelated.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    link = root / f"{SANDBOX_DIR_PREFIX}{dead_pid}-link"
    link.symlink_to(outside)

    report = asyncio.run(sweep_dead_runs(sandbox_roots=[root], cgroup_roots={}))

    assert not any(path.exists() for path in dead)
    assert live.is_dir() and own.is_dir() and unrelated.is_dir()
    assert link.is_symlink() and (outside / "keep.txt").read_text() == "keep"  # never followed
    assert report.directories == 2 and report.cgroups == 0 and report.owners == (dead_pid,)
    assert report.failed == 0
    expected = f"swept 2 sandbox directories and 0 cgroups of dead runs (pids {dead_pid})"
    assert report.line() == expected


def test_sweep_of_a_clean_host_reports_nothing(tmp_path: Path) -> None:
    report = asyncio.run(sweep_dead_runs(sandbox_roots=[tmp_path / "absent"], cgroup_roots={}))
    assert not report and report.directories == report.cgroups == 0


def _cgroup(pid: int) -> Cgroup:
    cgroup = Cgroup.create(
        f"agent-rl-{pid}-{uuid.uuid4().hex[:12]}", max_processes=64, memory_bytes=256 << 20
    )
    if cgroup is None:
        pytest.skip("no writable pids or memory cgroup here")
    return cgroup


def test_sweep_kills_what_is_left_in_a_dead_owners_cgroup_and_removes_it(
    dead_pid: int, live_pid: int
) -> None:
    orphaned, kept = _cgroup(dead_pid), _cgroup(live_pid)
    sleeper = subprocess.Popen(join_argv(orphaned.procs_files(), ["sleep", "60"]))
    try:
        deadline = time.monotonic() + 10
        while sleeper.pid not in orphaned.pids():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        orphaned_dirs = list(orphaned.dirs.values())
        roots = {controller: path.parent for controller, path in orphaned.dirs.items()}

        report = asyncio.run(sweep_dead_runs(sandbox_roots=[], cgroup_roots=roots))

        assert sleeper.wait(timeout=10) == -9
        assert not any(path.exists() for path in orphaned_dirs)
        assert all(path.is_dir() for path in kept.dirs.values())
        assert report.cgroups >= 1 and dead_pid in report.owners
        assert live_pid not in report.owners
    finally:
        sleeper.kill()
        sleeper.wait()
        asyncio.run(orphaned.remove())
        asyncio.run(kept.remove())
