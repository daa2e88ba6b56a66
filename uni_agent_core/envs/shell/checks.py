"""The hidden check scripts of shell tasks: how they are written, what a task row carries, and
how their report is read.

A check script is bash, run in the task's working directory once the agent is done. It prints
one line per named check, `ok <name>` or `fail <name>: <why>`, and exits 0 iff every check
passed. Each check runs in a subshell (a `cd` in one does not move the next) and compares the
final state with values written into the script itself, so it reads nothing the agent could
have prepared but the state it is scoring. The report is read against the names the task row
lists: a check counts as passed only on exactly one `ok` line and no `fail` line, so output
that a program of the agent's prints during a check cannot add a pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

CHECK_NAME = re.compile(r"^[A-Za-z0-9_.:/+-]+$")
"""Check names: no spaces, no `: ` (the report's separator), one line."""

EXIT_CHECK = "exit-status"
"""The failure added when the script exits non-zero although every named check passed."""

_PRELUDE = r"""#!/usr/bin/env bash
# Hidden check of a shell task: one `ok NAME` or `fail NAME: WHY` line per check; exit 0 iff
# every check passed.
set -u
export LC_ALL=C
__failed=0
__run() {
  local why
  if why=$("$2" 2>&1 </dev/null); then
    printf 'ok %s\n' "$1"
  else
    why=${why//$'\n'/ }
    printf 'fail %s: %s\n' "$1" "${why:0:300}"
    __failed=1
  fi
}
need_file() {
  [[ -f $1 && ! -L $1 ]] || { echo "$1 is not a regular file"; return 1; }
}
trimmed() {
  local text
  text=$(cat -- "$1") || return 1
  text=${text#"${text%%[![:space:]]*}"}
  printf '%s' "${text%"${text##*[![:space:]]}"}"
}
text_is() {
  need_file "$1" || return 1
  local got
  got=$(cat -- "$1")
  [[ $got == "$2" ]] || { echo "$1 does not hold the expected text"; return 1; }
}
word_is() {
  need_file "$1" || return 1
  local got
  got=$(trimmed "$1")
  [[ $got == "$2" ]] || { echo "$1 holds '${got:0:80}', not the expected value"; return 1; }
}
bytes_are() {
  need_file "$1" || return 1
  cmp -s -- "$1" <(printf '%s' "$2") || { echo "$1 differs from the expected contents"; return 1; }
}
"""


@dataclass(frozen=True)
class Check:
    """One named check: a bash function body that returns 0 when the state is right, or prints
    why not and returns 1. It may use the prelude's helpers: `need_file PATH`, `text_is PATH
    TEXT` (trailing newlines ignored), `word_is PATH VALUE` (surrounding whitespace ignored),
    `bytes_are PATH CONTENTS` (exact) and `trimmed PATH`."""

    name: str
    body: str

    def __post_init__(self) -> None:
        if not CHECK_NAME.match(self.name):
            raise ValueError(f"check name {self.name!r} must match {CHECK_NAME.pattern}")


def check_script(checks: Sequence[Check]) -> str:
    """The bash script that runs `checks` in order and reports each."""
    if not checks:
        raise ValueError("a check script needs at least one check")
    names = [check.name for check in checks]
    if len(set(names)) != len(names):
        raise ValueError(f"check names repeat: {names}")
    parts = [_PRELUDE]
    for number, check in enumerate(checks):
        parts.append(f"__check_{number}() {{\n{check.body.rstrip()}\n}}\n")
    # One compound command: bash parses it whole before running any check, so a program that
    # rewrites this file while a check runs it cannot change what runs next.
    parts.append("{\n")
    parts += [f"__run {check.name} __check_{number}\n" for number, check in enumerate(checks)]
    parts.append("exit $__failed\n}\n")
    return "".join(parts)


class ShellTaskData(BaseModel):
    """A shell task's `env_data`: never shown to the agent."""

    model_config = ConfigDict(extra="forbid")

    setup: str = Field(min_length=1)
    """Bash run in the empty working directory before the agent starts: the starting files."""
    check: str = Field(min_length=1)
    """The hidden check script (`check_script`), run in the working directory afterwards."""
    checks: list[str] = Field(default_factory=list)
    """The names the check script reports, in order; empty takes the names it prints."""


@dataclass(frozen=True)
class CheckReport:
    """What one run of a check script found."""

    passed: list[str]
    failed: dict[str, str]
    """Failed check -> why."""
    exit_code: int
    timed_out: bool = False
    started_at: float = 0.0
    """Unix time the script started."""
    seconds: float = 0.0
    output: str = ""
    """The script's stdout and stderr (clipped by the caller)."""

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed)

    @property
    def fraction(self) -> float:
        """Share of checks passed, in [0, 1]."""
        return len(self.passed) / self.total if self.total else 0.0

    @property
    def resolved(self) -> bool:
        """Every check passed and the script exited 0 in time."""
        return bool(self.passed) and not self.failed and self.exit_code == 0 and not self.timed_out


def parse_report(
    output: str,
    exit_code: int,
    *,
    expected: Sequence[str] = (),
    timed_out: bool = False,
    started_at: float = 0.0,
    seconds: float = 0.0,
) -> CheckReport:
    """Read a check script's output against the check names the task lists.

    Args:
        output: the script's stdout (stderr may follow; lines that are not results are skipped).
        exit_code: the script's exit status.
        expected: the task's check names; empty takes every name the output reports.
        timed_out: the script was killed at its deadline (every check without a result fails).
        started_at: Unix time the script started.
        seconds: how long it ran.
    """
    oks: dict[str, int] = {}
    fails: dict[str, str] = {}
    for line in output.splitlines():
        if line.startswith("ok "):
            name = line[3:].strip()
            oks[name] = oks.get(name, 0) + 1
        elif line.startswith("fail "):
            name, _, why = line[5:].partition(": ")
            fails.setdefault(name.strip(), why.strip() or "failed")
    names = list(expected) or list(dict.fromkeys([*oks, *fails]))
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        if name in fails:
            failed[name] = fails[name]
        elif oks.get(name, 0) > 1:
            failed[name] = "reported more than once"
        elif oks.get(name) == 1:
            passed.append(name)
        else:
            failed[name] = "timed out" if timed_out else "no result (the check script stopped)"
    if exit_code != 0 and not failed:
        failed[EXIT_CHECK] = f"the check script exited {exit_code}"
    return CheckReport(
        passed=passed,
        failed=failed,
        exit_code=exit_code,
        timed_out=timed_out,
        started_at=started_at,
        seconds=seconds,
        output=output,
    )
