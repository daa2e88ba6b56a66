"""Sweeping what dead runs left on this host: local sandboxes' directories and cgroups.

A `LocalSandbox` names its host directory `agent-rl-sandbox-<owner pid>-<random>` (in the sandbox
root, the temp dir by default; `local.py`) and its cgroup `agent-rl-<owner pid>-<12 hex>`
(`limits.py`), and removes both on `close()`. A process killed with SIGKILL never closes them.
`sweep_dead_runs`, called when a run starts (`rl/launch.py`), removes those whose owner is no
longer alive: first the cgroups (what still runs in one is killed, then the cgroup removed, as
`Cgroup.remove` does for a closing sandbox), then the directories. A live owner's sandboxes —
this process's and a concurrent run's — are never touched.

Liveness is judged in this process's pid namespace, so a sandbox root or cgroup tree shared with
processes of another pid namespace must not be swept from here. A pid reused by an unrelated
process keeps its dead predecessor's debris until that process exits too: the sweep errs towards
leaving things.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.sandbox.limits import Cgroup, Controller, controller_mounts
from uni_agent_core.sandbox.local import SANDBOX_DIR_PREFIX
from uni_agent_core.sandbox.workspace_files import force_rmtree

logger = logging.getLogger(__name__)

_SANDBOX_DIR = re.compile(rf"{re.escape(SANDBOX_DIR_PREFIX)}(\d+)-.+")
_CGROUP = re.compile(r"agent-rl-(\d+)-[0-9a-f]{12}")


def owner_alive(pid: int) -> bool:
    """Whether process `pid` is running here; a zombie (killed, not yet reaped) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    with contextlib.suppress(OSError, IndexError):
        # /proc/<pid>/stat: "<pid> (<comm>) <state> ..."; comm may hold spaces and parentheses
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        return state != "Z"
    return True


@dataclass(frozen=True)
class SweepReport:
    """What one sweep removed."""

    directories: int = 0
    """Sandbox directories removed."""
    cgroups: int = 0
    """Sandbox cgroups removed (one per sandbox, whatever its number of controller dirs)."""
    owners: tuple[int, ...] = ()
    """The dead owners whose leftovers were found, sorted."""
    failed: int = 0
    """Directories or cgroups that could not be removed (each logged as a warning)."""

    def __bool__(self) -> bool:
        return bool(self.directories or self.cgroups or self.failed)

    def line(self) -> str:
        """The one-line summary a run prints at start."""
        pids = ", ".join(map(str, self.owners))
        text = (
            f"swept {self.directories} sandbox directories and {self.cgroups} cgroups of dead "
            f"runs (pids {pids})"
        )
        return text + (f"; {self.failed} could not be removed" if self.failed else "")


async def sweep_dead_runs(
    *,
    sandbox_roots: Sequence[Path] | None = None,
    cgroup_roots: Mapping[Controller, Path] | None = None,
) -> SweepReport:
    """Removes the sandbox directories and cgroups whose owner pid is dead.

    Args:
        sandbox_roots: Directories holding sandbox directories; None is the temp dir (the local
            sandbox's default root).
        cgroup_roots: Per controller, the cgroup directory searched (recursively) for sandbox
            cgroups; None is every mount of `controller_mounts()`.

    Returns:
        What was removed. A directory or cgroup that cannot be removed is logged, counted in
        `failed` and left: cleaning up after a dead run never stops a new one.
    """
    roots = [Path(tempfile.gettempdir())] if sandbox_roots is None else sandbox_roots
    searched = controller_mounts() if cgroup_roots is None else cgroup_roots
    cgroups = _dead_cgroups(searched)
    directories = _dead_directories(roots)
    owners = {pid for pid, _ in (*cgroups, *directories)}
    names = [", ".join(map(str, sorted(c.dirs.values()))) for _, c in cgroups]  # before removal
    outcomes = await asyncio.gather(
        *(cgroup.remove() for _, cgroup in cgroups), return_exceptions=True
    )
    failed = _count_failures("cgroup", names, outcomes)
    removed_cgroups = len(cgroups) - failed
    outcomes = await asyncio.gather(
        *(asyncio.to_thread(force_rmtree, path) for _, path in directories),
        return_exceptions=True,
    )
    dir_failed = _count_failures("directory", [str(p) for _, p in directories], outcomes)
    report = SweepReport(
        directories=len(directories) - dir_failed,
        cgroups=removed_cgroups,
        owners=tuple(sorted(owners)),
        failed=failed + dir_failed,
    )
    if report:
        logger.info("%s", report.line())
    return report


def _dead_directories(roots: Sequence[Path]) -> list[tuple[int, Path]]:
    """(owner, path) of each sandbox directory in `roots` whose owner is dead; links are not
    sandboxes and are never followed."""
    found = []
    for root in roots:
        with contextlib.suppress(FileNotFoundError), os.scandir(root) as entries:
            for entry in entries:
                match = _SANDBOX_DIR.fullmatch(entry.name)
                if match and entry.is_dir(follow_symlinks=False):
                    pid = int(match.group(1))
                    if not owner_alive(pid):
                        found.append((pid, Path(entry.path)))
    return sorted(found)


def _dead_cgroups(roots: Mapping[Controller, Path]) -> list[tuple[int, Cgroup]]:
    """(owner, cgroup) of each sandbox cgroup below `roots` whose owner is dead, its controller
    directories gathered by name (a v1 sandbox has one per controller mount)."""
    by_name: dict[str, tuple[int, dict[Controller, Path]]] = {}
    searched: set[Path] = set()
    for controller, root in roots.items():
        if root in searched:  # v2: one tree for both controllers
            continue
        searched.add(root)
        for parent, children, _ in os.walk(root):
            for name in list(children):
                match = _CGROUP.fullmatch(name)
                if match is None:
                    continue
                children.remove(name)  # a sandbox cgroup holds no sandbox cgroups
                pid = int(match.group(1))
                if not owner_alive(pid):
                    by_name.setdefault(name, (pid, {}))[1][controller] = Path(parent) / name
    return [(pid, Cgroup(dirs)) for _, (pid, dirs) in sorted(by_name.items())]


def _count_failures(kind: str, names: Sequence[str], outcomes: Sequence[object]) -> int:
    failed = 0
    for name, outcome in zip(names, outcomes, strict=True):
        if isinstance(outcome, SandboxError | OSError):
            failed += 1
            logger.warning("could not sweep the dead run's %s %s: %s", kind, name, outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
    return failed
