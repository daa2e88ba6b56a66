"""The `shell` tool: bash commands whose working directory and exported variables persist.

`Sandbox.exec` runs every command in a fresh bash process, so the session's state lives in a
state file inside the sandbox (outside the repository, so `diff()` never sees it). Each call is
one bash script that:

1. merges stderr into stdout (the model reads one stream, in order, as in a terminal);
2. if the state file exists, unsets the exported variables, sources the saved ones and `cd`s to
   the saved directory (noting it in the output if that directory is gone);
3. installs an `EXIT` trap that writes the working directory and every exported variable back
   to the state file (atomically: a temporary file, then `mv`), so `cd`, `export` and `unset`
   in one call are seen by the next, even when the command calls `exit`;
4. runs the model's command with `eval` in that same shell.

A command that times out is killed with its whole process tree by the sandbox before its trap
can run, so the state stays what it was before that command and the session remains usable.
Shell options (`set -e`), functions and non-exported variables do not persist.
"""

from __future__ import annotations

import shlex
import uuid

from pydantic import Field

from uni_agent_core.sandbox.base import ExecResult, Sandbox
from uni_agent_core.tools.registry import (
    DEFAULT_MAX_OUTPUT_CHARS,
    Tool,
    ToolArgs,
    ToolResult,
    clip_output,
)

# `PWD`/`OLDPWD`/`SHLVL`/`_` are bash's own bookkeeping: restoring them would lie about the cwd.
_SCRIPT = r"""exec 2>&1
__agent_state={state}
__agent_save() {{
  local __agent_n
  {{
    printf '__agent_cwd=%q\n' "$PWD"
    for __agent_n in $(compgen -e); do
      case $__agent_n in PWD|OLDPWD|SHLVL|_) ;; *) declare -p "$__agent_n" ;; esac
    done
  }} >"$__agent_state.tmp" 2>/dev/null && mv -f "$__agent_state.tmp" "$__agent_state"
}}
if [[ -f $__agent_state ]]; then
  for __agent_n in $(compgen -e); do
    case $__agent_n in PWD|OLDPWD|SHLVL|_) ;; *) unset "$__agent_n" 2>/dev/null ;; esac
  done
  source "$__agent_state"
  cd -- "$__agent_cwd" 2>/dev/null || printf \
    '[shell: the working directory %s no longer exists; now in %s]\n' "$__agent_cwd" "$PWD"
  unset __agent_n __agent_cwd
fi
trap __agent_save EXIT
eval {command}
"""


class ShellArgs(ToolArgs):
    """Arguments of `shell`."""

    command: str = Field(min_length=1)
    """The bash command to run. The working directory and exported environment variables persist
    between calls; stdin is closed, so do not start interactive programs."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds before the command is killed; omit it for the default. Values above the
    tool's maximum are lowered to that maximum."""


class ShellTool(Tool[ShellArgs]):
    """Run bash commands in the sandbox, keeping `cd` and `export` across calls."""

    name = "shell"
    description = (
        "Run a bash command in the repository's sandbox and return its combined stdout and "
        "stderr. `cd` and exported variables persist between calls. Long output is clipped in "
        "the middle; long-running commands are killed after a timeout."
    )
    args_model = ShellArgs

    def __init__(
        self,
        *,
        timeout_s: float = 120.0,
        max_timeout_s: float | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        state_dir: str | None = None,
    ) -> None:
        """Create a shell session (its state is created by the first command).

        Args:
            timeout_s: default per-command timeout (the sandbox's `exec_timeout_s`).
            max_timeout_s: most seconds a call may ask for with `timeout`; None means
                `timeout_s` (a call may shorten its timeout but not lengthen it).
            max_output_chars: output longer than this is clipped, head and tail kept.
            state_dir: directory inside the sandbox, outside the repository, for the state
                file; None uses the sandbox's `$TMPDIR` (else `/tmp`), read before the session's
                own variables are restored, so an `export TMPDIR=...` cannot lose the state.

        Raises:
            ValueError: on a non-positive timeout, a maximum below the default, or a clip
                limit below 128.
        """
        max_timeout_s = timeout_s if max_timeout_s is None else max_timeout_s
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_timeout_s < timeout_s:
            raise ValueError(
                f"max_timeout_s ({max_timeout_s:g}) must be at least timeout_s ({timeout_s:g})"
            )
        clip_output("", max_output_chars)  # validates the limit
        self.timeout_s = timeout_s
        self.max_timeout_s = max_timeout_s
        self.max_output_chars = max_output_chars
        name = f"agent-shell-{uuid.uuid4().hex}.state"
        self.state_path: str | None = (
            None if state_dir is None else f"{state_dir.rstrip('/')}/{name}"
        )
        self._state_expr = (
            f'"${{TMPDIR:-/tmp}}"/{name}'
            if self.state_path is None
            else shlex.quote(self.state_path)
        )

    def script(self, command: str) -> str:
        """The bash script that runs `command` inside this session (what `exec` receives)."""
        return _SCRIPT.format(state=self._state_expr, command=shlex.quote(command))

    async def run(self, sandbox: Sandbox, args: ShellArgs) -> ToolResult:
        """Run the command in the session; see the module docstring for the state rules.

        Args:
            sandbox: the episode's sandbox.
            args: the command and an optional timeout.

        Returns:
            The clipped output; `error=True` on a non-zero exit status or a timeout.
        """
        timeout = min(args.timeout or self.timeout_s, self.max_timeout_s)
        result = await sandbox.exec(self.script(args.command), timeout=timeout)
        return self._observe(result, timeout)

    def _observe(self, result: ExecResult, timeout: float) -> ToolResult:
        body = result.stdout + result.stderr
        if result.timed_out:
            footer = (
                f"[command timed out after {timeout:g} s and was killed; the working directory "
                "and environment are as before it]"
            )
        elif result.exit_code != 0:
            footer = f"[exit code {result.exit_code}]"
        else:
            return ToolResult(
                output=clip_output(body, self.max_output_chars) or "(no output)", exit_code=0
            )
        if body:
            limit = max(self.max_output_chars - len(footer) - 1, 128)
            body = clip_output(body, limit)
            body += "" if body.endswith("\n") else "\n"
        exit_code = None if result.timed_out else result.exit_code
        return ToolResult(output=body + footer, error=True, exit_code=exit_code)
