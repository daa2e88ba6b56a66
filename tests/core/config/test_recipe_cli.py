"""`agent-rl recipe validate` end to end, as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def run_validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uni_agent_core.cli", "recipe", "validate", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )


def test_cli_accepts_all_shipped_recipes() -> None:
    recipes = sorted((REPO_ROOT / "recipes").glob("*.yaml"))
    result = run_validate(*recipes)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"OK {path}" for path in recipes]


def test_cli_names_every_bad_key_and_exits_non_zero(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("name: good\n", encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nengine:\n  type: hf\n  max_batchsize: 4\ntrainer:\n  mode: fast\n",
        encoding="utf-8",
    )
    result = run_validate(good, bad, tmp_path / "missing.yaml")
    assert result.returncode == 2
    assert result.stdout == f"OK {good}\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert lines[0].startswith(f"{bad}: engine.max_batchsize: unknown key 'max_batchsize'")
    assert "did you mean 'max_batch_size'?" in lines[0]
    assert lines[1] == (
        f"{bad}: trainer.mode: invalid value 'fast'; "
        "expected one of: sync, colocated_async, separate_async"
    )
    assert lines[2] == f"{tmp_path / 'missing.yaml'}: file not found"


def test_cli_applies_set_overrides_before_validating() -> None:
    recipe = REPO_ROOT / "recipes" / "tiny-cpu.yaml"
    ok = run_validate(recipe, "--set", "trainer.lr=3e-6")
    assert ok.returncode == 0, ok.stderr
    bad = run_validate(recipe, "--set", "engine.max_batchsize=3")
    assert bad.returncode == 2
    assert "engine.max_batchsize: unknown key" in bad.stderr
    assert "max_batch_size" in bad.stderr and "--set engine.max_batchsize=3" in bad.stderr
