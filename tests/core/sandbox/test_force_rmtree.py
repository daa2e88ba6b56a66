"""`force_rmtree` removes what an agent made unreadable, as the non-root host user a run
usually is (issue 48, finding 5: `mkdir -p x/y && chmod 000 x` made cleanup raise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from uni_agent_core.sandbox import workspace_files
from uni_agent_core.sandbox.workspace_files import force_rmtree

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
"""Runs the check as `nobody` (this interpreter may sit in a directory `nobody` cannot enter;
`workspace_files` needs only the standard library)."""

AGENT_MADE = """
import os, sys
root = sys.argv[1]
os.makedirs(f"{root}/x/y/z")
open(f"{root}/x/y/z/file", "w").close()
os.makedirs(f"{root}/ro/sub")
open(f"{root}/ro/sub/file", "w").close()
os.symlink("/etc", f"{root}/x/y/link")
os.chmod(f"{root}/x/y/z", 0)
os.chmod(f"{root}/x", 0)
os.chmod(f"{root}/ro/sub", 0o500)
os.chmod(f"{root}/ro", 0o100)
"""
"""An agent's chmods: a directory with no permission at all, one search-only, one read-only."""


def _as_nobody(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SYSTEM_PYTHON, "-c", code, *args],
        user=NOBODY,
        group=NOBODY,
        capture_output=True,
        text=True,
    )


@pytest.fixture
def tree() -> Iterator[Path]:
    # directly in the temporary directory: pytest's own is closed to other users
    root = Path(tempfile.mkdtemp(prefix="agent-rl-rmtree-"))
    try:
        if os.geteuid() == 0:
            os.chown(root, NOBODY, NOBODY)
            made = _as_nobody(AGENT_MADE, str(root))
            assert made.returncode == 0, made.stderr
        else:
            subprocess.run([sys.executable, "-c", AGENT_MADE, str(root)], check=True)
        yield root
    finally:
        if root.exists():
            force_rmtree(root)


def test_a_tree_an_agent_made_unreadable_is_removed_by_a_non_root_user(tree: Path) -> None:
    if os.geteuid() != 0:
        force_rmtree(tree)
    else:
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            pytest.skip(f"no {SYSTEM_PYTHON} to run the removal as nobody")
        removal = (
            "import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('workspace_files', sys.argv[1])\n"
            "module = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "module.force_rmtree(sys.argv[2])\n"
        )
        removed = _as_nobody(removal, workspace_files.__file__, str(tree))
        assert removed.returncode == 0, removed.stderr
    assert not tree.exists()
    assert Path("/etc").is_dir()  # the link was removed, not followed


def test_nothing_outside_the_tree_is_touched(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    os.chmod(outside, 0o500)
    inside = tmp_path / "inside"
    (inside / "a").mkdir(parents=True)
    os.symlink(outside, inside / "a" / "link")
    os.chmod(inside / "a", 0)
    try:
        force_rmtree(inside)
        assert not inside.exists()
        assert outside.stat().st_mode & 0o777 == 0o500
    finally:
        os.chmod(outside, 0o700)
        shutil.rmtree(outside)
