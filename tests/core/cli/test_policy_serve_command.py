"""`agent-rl serve`: what it refuses before any server starts (the servers themselves are tested
in tests/core/rl/test_serve.py)."""

from __future__ import annotations

from pathlib import Path

from uni_agent_core.cli.main import USAGE_ERROR, main

ROOT = Path(__file__).resolve().parents[3]
CI_SMOKE = str(ROOT / "recipes" / "ci-smoke.yaml")


def test_a_missing_checkpoint_is_a_usage_error(tmp_path, capsys) -> None:
    code = main(
        ["serve", "--recipe", CI_SMOKE, "--checkpoint", "latest", "--run-dir", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == USAGE_ERROR
    assert f"error: no complete checkpoint 'latest' under {tmp_path}/checkpoints" in err
    assert "Traceback" not in err


def test_a_missing_vllm_python_says_how_to_get_one(tmp_path, capsys) -> None:
    python = tmp_path / "nope" / "python"
    code = main(
        [
            "serve",
            "--recipe",
            CI_SMOKE,
            "--set",
            f"serve.python={python}",
            "--run-dir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == USAGE_ERROR
    assert f"error: {python} does not exist" in err and "make setup" in err
