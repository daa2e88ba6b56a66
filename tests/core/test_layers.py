"""The package layers of `uni_agent_core` hold: `lint-imports` keeps its contracts (no package
imports one above it, the library never imports prefect), and every package imports on its own
in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    path.parent.name
    for path in (ROOT / "uni_agent_core").glob("*/__init__.py")
    if path.parent.name != "__pycache__"
) + sorted(path.stem for path in (ROOT / "uni_agent_core").glob("*.py") if path.stem != "__init__")


def test_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_directory_of_the_library_is_a_package():
    missing = [
        path.name
        for path in (ROOT / "uni_agent_core").iterdir()
        if path.is_dir()
        and path.name != "__pycache__"
        and any(path.glob("*.py"))
        and not (path / "__init__.py").exists()
    ]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_on_its_own(package: str):
    done = subprocess.run(
        [sys.executable, "-c", f"import uni_agent_core.{package}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
