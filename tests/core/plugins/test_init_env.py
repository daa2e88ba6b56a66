"""`agent-rl init env NAME` writes a package that installs with pip, names itself to recipes
through its entry points, and whose own tests pass (issue 49, "Packages")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from uni_agent_core.cli import main

AGENT_RL = str(Path(sys.executable).parent / "agent-rl")


def _run(command: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_scaffold_installs_validates_and_passes_its_own_tests(tmp_path, capsys) -> None:
    assert main(["init", "env", "my_env", "--dir", str(tmp_path)]) == 0
    assert "wrote the task environment package my_env" in capsys.readouterr().out
    package = tmp_path / "my_env"
    site = tmp_path / "site"
    installed = _run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--target", str(site), str(package)],
        tmp_path,
        site,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    listed = _run([AGENT_RL, "plugins", "list", "--kind", "task_env"], tmp_path, site)
    assert "my_env.environment:MyEnvEnvironment  [my-env 0.1.0]" in listed.stdout
    validated = _run([AGENT_RL, "recipe", "validate", "my_env/recipe.yaml"], tmp_path, site)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    own_tests = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "my_env/tests"],
        tmp_path,
        site,
    )
    assert own_tests.returncode == 0, own_tests.stdout[-2000:]
    assert "3 passed" in own_tests.stdout


@pytest.mark.parametrize(
    ("name", "says"),
    [("My-Env", "use lowercase letters"), ("taken", "already exists")],
)
def test_a_bad_name_or_a_taken_directory_is_one_line(name, says, tmp_path, capsys) -> None:
    (tmp_path / "taken").mkdir()
    assert main(["init", "env", name, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
