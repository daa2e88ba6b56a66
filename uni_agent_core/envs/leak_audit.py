"""The leak auditor: did an episode try to read the answer instead of working it out?

Scans the shell commands of a trajectory (from its tool calls) for answer mining: walking every
ref (`git log --all`), opening commits by hash (`git show <sha>`), the reflog or unreachable
objects, fetching or cloning the upstream, and downloading from code hosts (`curl`/`wget` or
any URL of github.com, gitlab.com, ...), running a task generator (`agent-rl data generate`,
agent-rl's Python package), and reading task data (`tasks.jsonl`, a dataset's `dataset.key`,
the agent-rl cache). Git hygiene removes newer history from the agent's sandbox and the
sandbox shows no task data or agent-rl install; the auditor makes the attempt itself visible,
counts it, and — when the recipe says `leak_audit: zero` — takes the reward away. Ordinary git
use (`git diff`, `git status`, `git log -5`, `git show HEAD`) is not flagged.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from uni_agent_core.types import ToolCall


class LeakKind(StrEnum):
    ALL_REFS_LOG = "all_refs_log"
    COMMIT_BY_HASH = "commit_by_hash"
    REFLOG = "reflog"
    UNREACHABLE_OBJECTS = "unreachable_objects"
    FETCH_UPSTREAM = "fetch_upstream"
    CODE_HOST_DOWNLOAD = "code_host_download"
    TASK_GENERATOR = "task_generator"
    DATASET_READ = "dataset_read"


class LeakFinding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: LeakKind
    command: str
    """The sub-command that was flagged."""


class LeakReport(BaseModel):
    """Every finding of one trajectory."""

    model_config = ConfigDict(extra="forbid")

    findings: list[LeakFinding] = Field(default_factory=list)
    commands_scanned: int = 0

    @property
    def flagged(self) -> bool:
        return bool(self.findings)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(str(finding.kind) for finding in self.findings))


CODE_HOSTS = (
    "github.com",
    "githubusercontent.com",
    "gitlab.com",
    "bitbucket.org",
    "codeberg.org",
    "sourceforge.net",
    "git.kernel.org",
    "googlesource.com",
    "sr.ht",
)
_HOSTS = "|".join(re.escape(host) for host in CODE_HOSTS)
_CODE_HOST_URL = re.compile(
    r"(?:(?:https?|ftp|git|ssh)://(?:[^\s/'\"]*\.)?(?:" + _HOSTS + r")\b|git@(?:" + _HOSTS + r"):)"
)
_TASK_GENERATOR = re.compile(
    r"\bagent-rl\b.*\bdata\s+generate\b|\buni_agent_core\b|\bmicro_swe\.generator\b"
)
"""agent-rl's task generator, by its command or by its Python package."""
_DATASET_FILES = re.compile(
    r"\btasks\.jsonl\b|\bdataset\.key\b|micro-swe\.key\b|\.cache/agent-rl\b|AGENT_RL_CACHE"
)
"""Files and places that hold task rows, dataset keys or hidden tests."""
_NON_FETCHING_PROGRAMS = {"echo", "printf", "git"}
"""A URL printed or in a git message fetches nothing; git's own fetching is FETCH_UPSTREAM."""
_SEPARATORS = re.compile(r"\|\||&&|[;|\n&]|\$\(|`")
_HEX = re.compile(r"^[0-9a-f]{7,40}(?:[\^~:].*)?$")
_GIT_GLOBAL_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace"}
_ALL_REFS = {"--all", "--branches", "--remotes", "--tags", "--glob", "--exclude"}
_REFLOG_FLAGS = {"-g", "--walk-reflogs", "--reflog"}
_LOG_LIKE = {"log", "shortlog", "rev-list", "whatchanged", "for-each-ref", "show-branch"}
_BY_HASH = {"show", "cat-file", "cherry-pick", "format-patch"}
_FETCHING = {"fetch", "pull", "clone", "ls-remote", "submodule"}
_UNREACHABLE = {"--lost-found", "--unreachable", "--dangling"}


def _tokens(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:
        return command.split()


def _git_args(tokens: list[str]) -> tuple[str, list[str]] | None:
    """(subcommand, args) of a git invocation, global options skipped; None if not git."""
    start = next((i for i, token in enumerate(tokens) if token.rsplit("/", 1)[-1] == "git"), None)
    if start is None:
        return None
    rest = tokens[start + 1 :]
    index = 0
    while index < len(rest) and rest[index].startswith("-"):
        option = rest[index].split("=", 1)[0]
        index += 2 if option in _GIT_GLOBAL_WITH_VALUE and "=" not in rest[index] else 1
    if index >= len(rest):
        return None
    return rest[index], rest[index + 1 :]


def _git_kinds(sub: str, args: list[str]) -> list[LeakKind]:
    flags = {arg.split("=", 1)[0] for arg in args}
    kinds: list[LeakKind] = []
    if sub in _LOG_LIKE and flags & _ALL_REFS:
        kinds.append(LeakKind.ALL_REFS_LOG)
    if sub == "reflog" or (sub in _LOG_LIKE and flags & _REFLOG_FLAGS):
        kinds.append(LeakKind.REFLOG)
    if sub in _BY_HASH and any(_HEX.match(arg) for arg in args if not arg.startswith("-")):
        kinds.append(LeakKind.COMMIT_BY_HASH)
    if sub == "fsck" and flags & _UNREACHABLE:
        kinds.append(LeakKind.UNREACHABLE_OBJECTS)
    if sub in _FETCHING or (sub == "remote" and args[:1] in (["add"], ["set-url"], ["update"])):
        kinds.append(LeakKind.FETCH_UPSTREAM)
    return kinds


def audit_command(command: str) -> list[LeakFinding]:
    """The findings of one shell command (every `;`/`&&`/`|` part is checked)."""
    findings: list[LeakFinding] = []
    for part in _SEPARATORS.split(command):
        part = part.strip()
        if not part:
            continue
        kinds: list[LeakKind] = []
        tokens = _tokens(part)
        git = _git_args(tokens)
        if git is not None:
            kinds += _git_kinds(*git)
        if ".git/logs" in part:
            kinds.append(LeakKind.REFLOG)
        program = tokens[0].rsplit("/", 1)[-1] if tokens else ""
        if _CODE_HOST_URL.search(part) and program not in _NON_FETCHING_PROGRAMS:
            kinds.append(LeakKind.CODE_HOST_DOWNLOAD)
        if _TASK_GENERATOR.search(part):
            kinds.append(LeakKind.TASK_GENERATOR)
        if _DATASET_FILES.search(part):
            kinds.append(LeakKind.DATASET_READ)
        findings += [LeakFinding(kind=kind, command=part) for kind in dict.fromkeys(kinds)]
    return findings


def audit_commands(commands: Iterable[str]) -> LeakReport:
    """The findings of a sequence of shell commands."""
    report = LeakReport()
    for command in commands:
        report.commands_scanned += 1
        report.findings += audit_command(command)
    return report


_COMMAND_KEYS = ("command", "cmd", "script", "bash")


def commands_from_tool_calls(calls: Iterable[Mapping[str, Any] | ToolCall]) -> list[str]:
    """Shell commands inside tool calls (a harness's `ToolCall`s, or `{"name", "arguments"}`
    mappings; arguments a dict or JSON).

    Only command-like arguments (`command`, `cmd`, `script`, `bash`) are taken, so a file an
    editor tool writes that merely mentions `git log --all` is not flagged.
    """
    import json

    commands: list[str] = []
    for call in calls:
        arguments = call.arguments if isinstance(call, ToolCall) else call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                continue
        if isinstance(arguments, Mapping):
            commands += [str(arguments[k]) for k in _COMMAND_KEYS if arguments.get(k)]
    return commands


def apply_leak_policy(
    reward: float, report: LeakReport, mode: Literal["off", "flag", "zero"]
) -> tuple[float, bool]:
    """(reward, flagged) under the recipe's `reward.leak_audit` mode."""
    if mode == "off":
        return reward, False
    flagged = report.flagged
    return (0.0 if flagged and mode == "zero" else reward), flagged
