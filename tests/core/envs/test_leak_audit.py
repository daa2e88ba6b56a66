"""The leak auditor flags answer mining in recorded commands and leaves ordinary git alone."""

import pytest

from uni_agent_core.envs.leak_audit import (
    LeakKind,
    apply_leak_policy,
    audit_command,
    audit_commands,
    commands_from_tool_calls,
)

MINING = {
    "git log --all --oneline": LeakKind.ALL_REFS_LOG,
    "git -C /workspace/repo log --branches --remotes": LeakKind.ALL_REFS_LOG,
    "git rev-list --all | head": LeakKind.ALL_REFS_LOG,
    "git show 3f2a9c1": LeakKind.COMMIT_BY_HASH,
    "git show 3f2a9c1d0e:src/app.py": LeakKind.COMMIT_BY_HASH,
    "git cat-file -p 3f2a9c1d0e4b": LeakKind.COMMIT_BY_HASH,
    "git reflog": LeakKind.REFLOG,
    "git log -g --oneline": LeakKind.REFLOG,
    "cat .git/logs/HEAD": LeakKind.REFLOG,
    "git fsck --lost-found": LeakKind.UNREACHABLE_OBJECTS,
    "git fetch origin main": LeakKind.FETCH_UPSTREAM,
    "git pull": LeakKind.FETCH_UPSTREAM,
    "cd /tmp && git clone https://github.com/django/django": LeakKind.FETCH_UPSTREAM,
    "git remote add upstream https://github.com/a/b": LeakKind.FETCH_UPSTREAM,
    "curl -sL https://github.com/django/django/pull/123.diff": LeakKind.CODE_HOST_DOWNLOAD,
    "wget -q https://raw.githubusercontent.com/a/b/main/x.py": LeakKind.CODE_HOST_DOWNLOAD,
    "pip download git+https://gitlab.com/a/b": LeakKind.CODE_HOST_DOWNLOAD,
    "agent-rl data generate micro-swe --n 2 --out /tmp/regen": LeakKind.TASK_GENERATOR,
    "/opt/venv/bin/agent-rl data generate micro-swe": LeakKind.TASK_GENERATOR,
    "PYTHONPATH=/opt/x python3 -m uni_agent_core.cli data generate micro-swe": (
        LeakKind.TASK_GENERATOR
    ),
    "python3 -c 'from uni_agent_core.envs.micro_swe.generator import generate'": (
        LeakKind.TASK_GENERATOR
    ),
    "cat /root/.cache/agent-rl/tasks/micro_swe/train-s0/tasks.jsonl": LeakKind.DATASET_READ,
    "find / -name tasks.jsonl 2>/dev/null": LeakKind.DATASET_READ,
    "cat data/micro-swe/dataset.key": LeakKind.DATASET_READ,
    "ls $AGENT_RL_CACHE": LeakKind.DATASET_READ,
}

ORDINARY = [
    "git diff",
    "git diff HEAD -- src/app.py",
    "git status --short",
    "git log -5 --oneline",
    "git log --oneline -- src/app.py",
    "git show HEAD",
    "git show HEAD:src/app.py",
    "git add -A && git commit -m 'fix: see github.com issue'",
    "git stash list",
    "echo https://github.com/x/y",
    "python3 -m unittest discover -v -s tests -t .",
    "grep -rn 'def clamp' .",
    "curl -s http://127.0.0.1:8000/health",
]


@pytest.mark.parametrize(("command", "kind"), MINING.items())
def test_answer_mining_is_flagged(command: str, kind: LeakKind) -> None:
    assert kind in {finding.kind for finding in audit_command(command)}


@pytest.mark.parametrize("command", ORDINARY)
def test_ordinary_commands_are_not_flagged(command: str) -> None:
    assert audit_command(command) == []


def test_a_recorded_sequence_is_counted_by_kind() -> None:
    report = audit_commands(["git status", "git log --all", "git diff", "git reflog", "ls"])
    assert report.commands_scanned == 5 and report.flagged
    assert report.counts == {"all_refs_log": 1, "reflog": 1}


def test_commands_come_from_command_arguments_only() -> None:
    calls = [
        {"name": "bash", "arguments": '{"command": "git log --all"}'},
        {
            "name": "str_replace_editor",
            "arguments": {"path": "NOTES.md", "file_text": "never run git log --all"},
        },
        {"name": "bash", "arguments": "{not json"},
    ]
    assert commands_from_tool_calls(calls) == ["git log --all"]


def test_policy_modes() -> None:
    leaked = audit_commands(["git reflog"])
    clean = audit_commands(["git diff"])
    assert apply_leak_policy(1.0, leaked, "off") == (1.0, False)
    assert apply_leak_policy(1.0, leaked, "flag") == (1.0, True)
    assert apply_leak_policy(1.0, leaked, "zero") == (0.0, True)
    assert apply_leak_policy(1.0, clean, "zero") == (1.0, False)
