"""`agent-rl` prints recipe and usage errors as a few lines and exits 2; Ctrl-C exits 130.

Both run the real entry: `main()` in process for every command that loads a recipe, and the
console module as a subprocess where a traceback would reach the terminal.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from uni_agent_core.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
AGENT_RL = [sys.executable, "-m", "uni_agent_core.cli"]
TYPO = "name: typo\nsandbox:\n  memory: 1024\n"
SYNTAX = "name: syntax\ntrainer:\n  lr: [1\n"


def agent_rl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the console script to completion."""
    return subprocess.run(
        [*AGENT_RL, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def recipe_commands(recipe: Path) -> dict[str, list[str]]:
    """Every command that reads a recipe, pointed at `recipe`."""
    given = ["--recipe", str(recipe)]
    return {
        "train": ["train", *given],
        "eval": ["eval", *given],
        "curriculum estimate": ["curriculum", "estimate", *given],
        "curriculum refresh": ["curriculum", "refresh", *given],
        "runs latest": ["runs", "latest", *given],
        "verl launch": ["verl", "launch", "--dry-run", *given],
        "data validate": ["data", "validate", str(recipe.parent / "tasks.jsonl"), *given],
        "gateway serve": ["gateway", "serve", *given],
    }


@pytest.fixture
def typo_recipe(tmp_path: Path) -> Path:
    path = tmp_path / "typo.yaml"
    path.write_text(TYPO, encoding="utf-8")
    return path


def test_train_prints_the_recipe_error_as_one_line_without_a_traceback(
    typo_recipe: Path,
) -> None:
    result = agent_rl("train", "--recipe", str(typo_recipe))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {typo_recipe}: sandbox.memory: unknown key 'memory'")
    assert "(did you mean 'memory_mb'?)" in line


@pytest.mark.parametrize("command", list(recipe_commands(Path("r.yaml"))))
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("typo", "sandbox.memory: unknown key 'memory' (did you mean 'memory_mb'?)"),
        ("syntax", "invalid YAML at line 4, column 1"),
        ("missing", "file not found"),
        ("bad --set", "an override must look like key.sub=value (from --set trainer..lr=1)"),
    ],
)
def test_every_recipe_command_exits_2_with_the_problem(
    command: str, kind: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "recipe.yaml"
    if kind != "missing":
        recipe.write_text(SYNTAX if kind == "syntax" else TYPO, encoding="utf-8")
    argv = recipe_commands(recipe)[command]
    if kind == "bad --set":
        recipe.write_text("name: ok\n", encoding="utf-8")
        argv = [*argv, "--set", "trainer..lr=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith(f"error: {recipe}: ") and expected in line


def test_a_usage_error_exits_2_without_a_traceback() -> None:
    result = agent_rl("chat", "hi", "--model", "no-such-policy")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "unknown policy 'no-such-policy'" in result.stderr


def _default_sigint() -> None:
    """Undo an inherited SIG_IGN for SIGINT in the child before it starts.

    A test run started in the background by a non-interactive shell (`make test &`, CI) has
    SIGINT ignored, children inherit that, and Python then never turns SIGINT into
    KeyboardInterrupt; a terminal's Ctrl-C reaches a process with the default disposition.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_with_one_line() -> None:
    # A greedy chat of a million tokens runs until interrupted; SIGINT lands once the policy
    # is loading, well inside main().
    chat = [*AGENT_RL, "chat", "hi", "--model", "tiny", "--max-new-tokens", "1000000"]
    process = subprocess.Popen(
        chat,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    assert process.stderr is not None
    try:
        seen, deadline = b"", time.monotonic() + 120
        while b"Loading weights" not in seen:
            assert process.poll() is None and time.monotonic() < deadline, seen.decode()
            if select.select([process.stderr], [], [], 1.0)[0]:
                seen += os.read(process.stderr.fileno(), 65536)
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # never leave the million-token chat running
            process.kill()
            process.wait()
    err = (seen + rest).decode()
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.splitlines()[-1] == "interrupted"
