"""The shell tool: persistent cwd and env over an exec-only sandbox, timeouts, clipping."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from support.bash_sandbox import BashSandbox

from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.tools.registry import ToolResult, clip_output
from uni_agent_core.tools.shell import ShellArgs, ShellTool


@pytest.fixture
def sandbox(tmp_path: Path) -> BashSandbox:
    (tmp_path / "repo" / "sub").mkdir(parents=True)
    return BashSandbox(tmp_path / "repo")


def make_shell(tmp_path: Path, **kwargs: float) -> ShellTool:
    state_dir = tmp_path / "state"
    state_dir.mkdir(exist_ok=True)
    return ShellTool(state_dir=str(state_dir), **kwargs)  # type: ignore[arg-type]


def run(shell: ShellTool, sandbox: Sandbox, command: str, **kwargs: float) -> ToolResult:
    return asyncio.run(shell.run(sandbox, ShellArgs(command=command, **kwargs)))


def test_output_exit_code_and_stderr_in_order(tmp_path: Path, sandbox: BashSandbox) -> None:
    assert isinstance(sandbox, Sandbox)
    shell = make_shell(tmp_path)
    ok = run(shell, sandbox, "echo out; echo err >&2; echo out2")
    assert ok == ToolResult(output="out\nerr\nout2\n", exit_code=0)
    failed = run(shell, sandbox, "echo oops; exit 3")
    assert failed.error and not failed.done
    assert failed.output == "oops\n[exit code 3]"
    assert run(shell, sandbox, "true") == ToolResult(output="(no output)", exit_code=0)
    failed_false = ToolResult(output="[exit code 1]", error=True, exit_code=1)
    assert run(shell, sandbox, "false") == failed_false


def test_cwd_and_exported_env_persist(tmp_path: Path, sandbox: BashSandbox) -> None:
    shell = make_shell(tmp_path)
    assert not run(shell, sandbox, "cd sub && export GREETING='a b \"c\"\nline2'").error
    assert run(shell, sandbox, "pwd").output == f"{sandbox.workdir}/sub\n"
    assert run(shell, sandbox, 'echo "$GREETING"').output == 'a b "c"\nline2\n'
    assert run(shell, sandbox, "unset GREETING; NOT_EXPORTED=1").output == "(no output)"
    assert run(shell, sandbox, 'echo "${GREETING-gone} ${NOT_EXPORTED-local}"').output == (
        "gone local\n"
    )
    # `exit` still saves the state: the trap runs on every normal exit of the shell.
    assert run(shell, sandbox, "cd .. && export X=1 && exit 4").output == "[exit code 4]"
    assert run(shell, sandbox, 'pwd; echo "$X"').output == f"{sandbox.workdir}\n1\n"
    # Another session starts fresh in the work directory.
    other = make_shell(tmp_path)
    assert run(other, sandbox, 'cd sub; echo "${X-unset}"').output == "unset\n"
    assert run(shell, sandbox, "pwd").output == f"{sandbox.workdir}\n"


def test_quoting_heredocs_and_syntax_errors(tmp_path: Path, sandbox: BashSandbox) -> None:
    shell = make_shell(tmp_path)
    heredoc = "cat <<'EOF'\n$HOME 'single' \"double\" `tick`\nEOF"
    assert run(shell, sandbox, heredoc).output == "$HOME 'single' \"double\" `tick`\n"
    broken = run(shell, sandbox, "if then fi")
    assert broken.error and "syntax error" in broken.output
    assert run(shell, sandbox, "echo still here").output == "still here\n"


def test_state_file_lives_outside_the_repository(tmp_path: Path, sandbox: BashSandbox) -> None:
    shell = make_shell(tmp_path)
    run(shell, sandbox, "cd sub && export A=1")
    assert sorted(p.name for p in Path(sandbox.workdir).rglob("*")) == ["sub"]
    assert Path(shell.state_path).is_file()
    assert Path(shell.state_path).parent == tmp_path / "state"


def test_default_state_dir_is_the_sandboxs_tmpdir(
    tmp_path: Path, sandbox: BashSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmpdir = tmp_path / "sandbox-tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))  # the double passes its environment on
    shell = ShellTool()
    assert shell.state_path is None
    run(shell, sandbox, f"cd sub && export TMPDIR={tmp_path}")
    assert [p.suffix for p in tmpdir.iterdir()] == [".state"]
    # The agent's own TMPDIR does not move the state file.
    assert (
        run(shell, sandbox, 'pwd; echo "$TMPDIR"').output == f"{sandbox.workdir}/sub\n{tmp_path}\n"
    )


def test_removed_cwd_falls_back_with_a_note(tmp_path: Path, sandbox: BashSandbox) -> None:
    shell = make_shell(tmp_path)
    run(shell, sandbox, "mkdir gone && cd gone")
    shutil.rmtree(Path(sandbox.workdir, "gone"))
    result = run(shell, sandbox, "pwd")
    assert "no longer exists" in result.output
    assert result.output.endswith(f"{sandbox.workdir}\n")


def test_timeout_is_reported_and_the_session_survives(tmp_path: Path, sandbox: BashSandbox) -> None:
    shell = make_shell(tmp_path, timeout_s=0.5)
    run(shell, sandbox, "export KEEP=yes")
    started = time.monotonic()
    result = run(shell, sandbox, "cd sub; export KEEP=no; echo started; sleep 30")
    assert time.monotonic() - started < 5
    assert result.error and not result.done
    assert result.output.startswith("started\n")
    assert "command timed out after 0.5 s" in result.output
    # The killed command never saved its state: the session is as before it.
    assert run(shell, sandbox, 'pwd; echo "$KEEP"').output == f"{sandbox.workdir}\nyes\n"


def test_per_call_timeout_is_capped_at_the_maximum(tmp_path: Path, sandbox: BashSandbox) -> None:
    shell = make_shell(tmp_path, timeout_s=5.0, max_timeout_s=6.0)
    assert "timed out after 0.3 s" in run(shell, sandbox, "sleep 30", timeout=0.3).output
    capped = make_shell(tmp_path, timeout_s=0.3)
    assert "timed out after 0.3 s" in run(capped, sandbox, "sleep 30", timeout=100).output
    with pytest.raises(ValueError, match="max_timeout_s"):
        ShellTool(timeout_s=10, max_timeout_s=5)
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        ShellTool(timeout_s=0)


def test_long_output_is_clipped_head_and_tail(tmp_path: Path, sandbox: BashSandbox) -> None:
    shell = make_shell(tmp_path, max_output_chars=1000)
    result = run(shell, sandbox, "seq 1 20000")
    full = "".join(f"{i}\n" for i in range(1, 20001))
    assert len(result.output) <= 1000 and not result.error
    head, marker, tail = result.output.partition("\n[... ")
    count, _, tail = tail.partition(" characters clipped ...]\n")
    assert full.startswith(head + "\n") or full.startswith(head)
    assert full.endswith(tail) and tail.endswith("20000\n")
    assert int(count) == len(full) - len(head) - len(tail)
    failed = run(shell, sandbox, "seq 1 20000; exit 1")
    assert len(failed.output) <= 1000 and failed.output.endswith("20000\n[exit code 1]")


def test_clip_output_contract() -> None:
    assert clip_output("short", 200) == "short"
    text = "x" * 500 + "y" * 500
    clipped = clip_output(text, 200)
    assert len(clipped) <= 200
    assert clipped.startswith("x") and clipped.endswith("y")
    assert "characters clipped" in clipped
    assert clip_output(clipped, 200) == clipped
    with pytest.raises(ValueError, match="at least 128"):
        clip_output(text, 10)


def test_schema_comes_from_the_arguments_model() -> None:
    schema = ShellTool().schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "shell" and "bash" in function["description"]
    params = function["parameters"]
    assert params["required"] == ["command"]
    assert params["additionalProperties"] is False
    assert params["properties"]["command"]["type"] == "string"
    assert "persist" in params["properties"]["command"]["description"]
    assert params["properties"]["timeout"]["type"] == "number"
    assert "title" not in str(schema)
