"""Git hygiene: after the scrub, no commit newer than the base is reachable or even stored."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.bash_sandbox import BashSandbox

from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.sandbox.git_hygiene import (
    GitHygieneError,
    assert_no_future_commits,
    scrub_git_history,
)


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def commit(repo: Path, content: str, message: str) -> str:
    (repo / "a.txt").write_text(content)
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def commits_present(repo: Path) -> set[str]:
    objects = git(
        repo, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype) %(objectname)"
    )
    return {line.split()[1] for line in objects.splitlines() if line.startswith("commit ")}


@dataclass
class Fixture:
    root: Path
    repo: Path
    first: str
    base: str
    future: str
    feature: str
    stash: str


@pytest.fixture
def leaky(tmp_path: Path) -> Fixture:
    """A repository checked out at `base` that leaks the future every way git allows."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    first = commit(repo, "v1\n", "first")
    base = commit(repo, "v2\n", "base")
    future = commit(repo, "v3 the fix\n", "the fix")
    git(repo, "checkout", "-q", "-b", "feature", base)
    feature = commit(repo, "feature work\n", "feature")
    git(repo, "checkout", "-q", "main")
    git(repo, "tag", "v-light", future)
    git(repo, "tag", "-a", "v-annotated", "-m", "release notes of the fix", feature)
    git(repo, "notes", "add", "-m", "a note", future)
    git(repo, "replace", future, base)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "main", "feature", "--tags")
    git(repo, "fetch", "-q", "origin")
    git(repo, "reset", "-q", "--hard", base)  # reflog and ORIG_HEAD now name the future
    (repo / "a.txt").write_text("stashed\n")
    git(repo, "stash", "-q")
    stash = git(repo, "rev-parse", "refs/stash")
    (repo / "a.txt").write_text("work in progress\n")
    (repo / "untracked.txt").write_text("keep me\n")
    assert (repo / ".git" / "ORIG_HEAD").exists() and (repo / ".git" / "FETCH_HEAD").exists()
    return Fixture(tmp_path, repo, first, base, future, feature, stash)


def test_scrub_leaves_only_the_base_and_its_ancestors(leaky: Fixture) -> None:
    sandbox = BashSandbox(leaky.root)
    assert isinstance(sandbox, Sandbox)
    report = asyncio.run(scrub_git_history(sandbox, str(leaky.repo), leaky.base[:10]))

    assert report.base_commit == leaky.base
    assert report.branch == "main"
    assert report.removed_remotes == ["origin"]
    assert report.pruned
    for ref in (
        "refs/heads/feature",
        "refs/tags/v-light",
        "refs/tags/v-annotated",
        "refs/notes/commits",
        "refs/stash",
        "refs/remotes/origin/main",
        f"refs/replace/{leaky.future}",
        "ORIG_HEAD",
        "FETCH_HEAD",
    ):
        assert ref in report.deleted_refs
    assert report.audit.ancestor_commits == report.audit.reachable_commits == 2
    assert report.audit.present_commits == 2

    repo = leaky.repo
    assert git(repo, "for-each-ref", "--format=%(refname)") == "refs/heads/main"
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(repo, "rev-parse", "HEAD") == leaky.base
    assert git(repo, "remote") == ""
    assert set(git(repo, "rev-list", "--all", "--reflog").split()) == {leaky.base, leaky.first}
    assert commits_present(repo) == {leaky.base, leaky.first}
    for gone in (leaky.future, leaky.feature, leaky.stash):
        missing = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", gone], check=False)
        assert missing.returncode != 0
    assert "fix" not in git(repo, "log", "--all", "--format=%s")
    assert not (repo / ".git" / "ORIG_HEAD").exists()
    assert not (repo / ".git" / "FETCH_HEAD").exists()
    # The working tree and the index are the agent's starting point and stay as they were.
    assert (repo / "a.txt").read_text() == "work in progress\n"
    assert (repo / "untracked.txt").read_text() == "keep me\n"
    git(repo, "fsck", "--full", "--strict")


def test_scrub_without_gc_fails_the_audit(leaky: Fixture) -> None:
    sandbox = BashSandbox(leaky.root)
    with pytest.raises(GitHygieneError, match="in the object store") as caught:
        asyncio.run(scrub_git_history(sandbox, str(leaky.repo), leaky.base, prune=False))
    assert caught.value.reachable == []
    assert {leaky.future, leaky.feature, leaky.stash} <= set(caught.value.stored)
    assert leaky.base not in caught.value.stored and leaky.first not in caught.value.stored
    assert leaky.future[:12] in str(caught.value)


def test_audit_of_an_unscrubbed_repository_names_reachable_commits(leaky: Fixture) -> None:
    sandbox = BashSandbox(leaky.root)
    with pytest.raises(GitHygieneError, match="reachable") as caught:
        asyncio.run(assert_no_future_commits(sandbox, str(leaky.repo), leaky.base))
    assert {leaky.future, leaky.feature, leaky.stash} <= set(caught.value.reachable)
    assert not set(caught.value.stored) & set(caught.value.reachable)


def test_audit_finds_a_dangling_commit_after_a_clean_scrub(leaky: Fixture) -> None:
    sandbox = BashSandbox(leaky.root)
    asyncio.run(scrub_git_history(sandbox, str(leaky.repo), leaky.base))
    audit = asyncio.run(assert_no_future_commits(sandbox, str(leaky.repo), "HEAD"))
    assert audit.present_commits == 2

    dangling = git(leaky.repo, "commit-tree", f"{leaky.base}^{{tree}}", "-p", leaky.base, "-m", "x")
    with pytest.raises(GitHygieneError) as caught:
        asyncio.run(assert_no_future_commits(sandbox, str(leaky.repo), leaky.base))
    assert caught.value.stored == [dangling]
    assert caught.value.reachable == []


def test_scrub_copies_objects_from_alternates_and_drops_them(leaky: Fixture) -> None:
    clone = leaky.root / "clone"
    git(leaky.root, "clone", "-q", "--shared", str(leaky.repo), str(clone))
    git(clone, "checkout", "-q", "--detach", leaky.base)
    alternates = clone / ".git" / "objects" / "info" / "alternates"
    assert alternates.exists()

    report = asyncio.run(scrub_git_history(BashSandbox(leaky.root), str(clone), leaky.base))
    assert report.branch == "main"  # HEAD was detached
    assert not alternates.exists()
    shutil.rmtree(leaky.repo)  # the clone no longer borrows anything from it
    git(clone, "fsck", "--full")
    assert commits_present(clone) == {leaky.base, leaky.first}


def test_scrub_refuses_a_head_that_is_not_the_base(leaky: Fixture) -> None:
    git(leaky.repo, "stash", "-q")
    git(leaky.repo, "checkout", "-q", "feature")
    with pytest.raises(GitHygieneError, match="not at the base commit"):
        asyncio.run(scrub_git_history(BashSandbox(leaky.root), str(leaky.repo), leaky.base))


def test_unknown_base_commit_is_a_clear_error(leaky: Fixture) -> None:
    sandbox = BashSandbox(leaky.root)
    with pytest.raises(GitHygieneError, match="not a commit of this repository: deadbeef"):
        asyncio.run(scrub_git_history(sandbox, str(leaky.repo), "deadbeef"))
    with pytest.raises(GitHygieneError, match="not a commit"):
        asyncio.run(assert_no_future_commits(sandbox, str(leaky.repo), "no-such-ref"))
