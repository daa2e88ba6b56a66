"""Git hygiene: before an agent starts, its repository holds no history newer than the base commit.

A SWE-bench-style task is only a test of the agent if the fix is not sitting in the repository:
a future commit on a branch, a tag, a remote-tracking ref, a stash, a reflog entry, or merely an
unreferenced object still in the object store can all be found with `git log --all`, `git
reflog` or `git fsck --lost-found`. `scrub_git_history` removes every such path; it runs in the
agent's sandbox after checkout and before the first tool call. `assert_no_future_commits` is the
check at its end, usable on its own (e.g. by the leak auditor).

All git commands run through `Sandbox.exec` with a timeout, so this works on every backend, and
with `GIT_NO_REPLACE_OBJECTS=1` so that replace refs cannot disguise a commit's ancestry.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

from uni_agent_core.errors import AgentRLError
from uni_agent_core.sandbox.base import Sandbox

_GIT_ENV = "export GIT_NO_REPLACE_OBJECTS=1 GIT_TERMINAL_PROMPT=0 LC_ALL=C\n"
"""Prefix of every script (not `exec(env=...)`, whose merge rules are the backend's)."""

_PSEUDO_REFS = (
    "FETCH_HEAD ORIG_HEAD MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD REBASE_HEAD BISECT_HEAD "
    "AUTO_MERGE BISECT_LOG BISECT_START BISECT_TERMS BISECT_NAMES BISECT_EXPECTED_REV "
    "rebase-merge rebase-apply sequencer"
)
"""Per-worktree files that can name commits outside `refs/`, and in-progress operation state."""

_COMMON_LEFTOVERS = "rr-cache info/grafts refs/original logs"
"""Shared files that remember other commits or their content: rerere's recorded conflict
resolutions, grafts, filter-branch backups and reflogs (expired first, then removed)."""

_MAX_LISTED = 20


class GitHygieneError(AgentRLError, RuntimeError):
    """The repository still exposes commits other than the base and its ancestors, or a git
    command of the scrub failed.

    Attributes:
        reachable: offending commits reachable from a ref, HEAD or a reflog.
        stored: offending commits present in the object store but unreachable.
    """

    def __init__(
        self, message: str, *, reachable: list[str] | None = None, stored: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.reachable: list[str] = reachable or []
        self.stored: list[str] = stored or []


class HistoryAudit(BaseModel):
    """The commit counts of a repository that passed `assert_no_future_commits`."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    base_commit: str
    """Full hash of the base commit."""
    ancestor_commits: int
    """Commits in the base's history, the base included."""
    reachable_commits: int
    """Commits reachable from any ref, HEAD or reflog (all of them ancestors of the base)."""
    present_commits: int
    """Commit objects in the object store (all of them ancestors of the base)."""


class HygieneReport(BaseModel):
    """What `scrub_git_history` removed and the audit that followed."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    base_commit: str
    """Full hash of the base commit, which HEAD's branch points at."""
    branch: str
    """The only ref left: `refs/heads/<branch>`, checked out."""
    removed_remotes: list[str]
    """Remotes that were configured (their URLs could fetch the future)."""
    deleted_refs: list[str]
    """Refs deleted (branches, tags, notes, stash, remote-tracking and replace refs) and pseudo
    refs or operation state removed from the git directory (`FETCH_HEAD`, `ORIG_HEAD`, ...)."""
    pruned: bool
    """Whether `git gc --prune=now` ran."""
    audit: HistoryAudit
    """The final check that nothing newer than the base is reachable or stored."""


async def _run(sandbox: Sandbox, repo_dir: str, script: str, what: str, timeout: float) -> str:
    result = await sandbox.exec(_GIT_ENV + script, timeout=timeout, cwd=repo_dir)
    if result.timed_out:
        raise GitHygieneError(f"{what} timed out after {timeout:g} s in {repo_dir}")
    if result.exit_code != 0:
        detail = (result.stderr.strip() or result.stdout.strip() or "no output")[-2000:]
        raise GitHygieneError(f"{what} failed in {repo_dir} (exit {result.exit_code}): {detail}")
    return result.stdout


async def _resolve_base(sandbox: Sandbox, repo_dir: str, base_commit: str, timeout: float) -> str:
    out = await _run(
        sandbox,
        repo_dir,
        f"git rev-parse --verify --quiet {shlex.quote(base_commit + '^{commit}')} || "
        f"{{ echo {shlex.quote('not a commit of this repository: ' + base_commit)} >&2; exit 3; }}",
        "resolving the base commit",
        timeout,
    )
    return out.strip()


async def assert_no_future_commits(
    sandbox: Sandbox, repo_dir: str | PurePosixPath, base_commit: str, *, timeout: float = 300.0
) -> HistoryAudit:
    """Check that only the base commit and its ancestors are reachable or even stored.

    Reachable means from any ref, HEAD or reflog entry (`git rev-list --all --reflog`); stored
    means any commit object in the object store, packed, loose or in an alternate
    (`git cat-file --batch-all-objects`). Each must be an ancestor of the base (or the base):
    the set difference against `git rev-list <base>` is computed in the sandbox in one pass,
    which is `git merge-base --is-ancestor <commit> <base>` for every commit at once.

    Args:
        sandbox: the sandbox holding the repository.
        repo_dir: the repository's directory inside the sandbox.
        base_commit: the task's base commit (any revision git can resolve).
        timeout: seconds allowed for each git script.

    Returns:
        The commit counts of the clean repository.

    Raises:
        GitHygieneError: listing the offending commits (reachable and merely stored), or when
            the base is not a commit of the repository or a git command fails.
    """
    repo = str(repo_dir)
    base = await _resolve_base(sandbox, repo, base_commit, timeout)
    out = await _run(
        sandbox,
        repo,
        f"""set -eo pipefail
base={base}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git rev-list "$base" >"$tmp/ancestors"
git rev-list --all --reflog >"$tmp/reachable"
git cat-file --batch-all-objects --batch-check='%(objecttype) %(objectname)' >"$tmp/objects"
awk -v A="$tmp/ancestors" -v R="$tmp/reachable" '
  FILENAME == A {{ ancestor[$1] = 1; na++; next }}
  FILENAME == R {{ nr++; if (!($1 in ancestor)) print "reachable " $1; next }}
  $1 == "commit" {{ np++; if (!($2 in ancestor)) print "stored " $2 }}
  END {{ printf "counts %d %d %d\\n", na, nr, np }}
' "$tmp/ancestors" "$tmp/reachable" "$tmp/objects"
""",
        "auditing the commits",
        timeout,
    )
    reachable: list[str] = []
    stored_or_reachable: list[str] = []
    counts: list[int] = []
    for line in out.splitlines():
        kind, _, value = line.partition(" ")
        if kind == "reachable":
            reachable.append(value)
        elif kind == "stored":
            stored_or_reachable.append(value)
        elif kind == "counts":
            counts = [int(part) for part in value.split()]
    seen = set(reachable)
    stored = [commit for commit in stored_or_reachable if commit not in seen]
    if len(counts) != 3 or counts[0] == 0:
        raise GitHygieneError(f"auditing the commits in {repo} gave no counts: {out[-2000:]!r}")
    if reachable or stored:
        raise GitHygieneError(
            _describe_offenders(repo, base, reachable, stored), reachable=reachable, stored=stored
        )
    return HistoryAudit(
        base_commit=base,
        ancestor_commits=counts[0],
        reachable_commits=counts[1],
        present_commits=counts[2],
    )


def _describe_offenders(repo: str, base: str, reachable: list[str], stored: list[str]) -> str:
    parts = [
        f"{len(reachable) + len(stored)} commits other than the base {base[:12]} and its "
        f"ancestors remain in {repo}"
    ]
    for label, commits in (("reachable", reachable), ("in the object store", stored)):
        if commits:
            shown = ", ".join(commit[:12] for commit in commits[:_MAX_LISTED])
            more = f" and {len(commits) - _MAX_LISTED} more" if len(commits) > _MAX_LISTED else ""
            parts.append(f"{label}: {shown}{more}")
    parts.append("run scrub_git_history (with prune) before the agent starts")
    return "; ".join(parts)


async def scrub_git_history(
    sandbox: Sandbox,
    repo_dir: str | PurePosixPath,
    base_commit: str,
    *,
    branch: str | None = None,
    prune: bool = True,
    timeout: float = 600.0,
) -> HygieneReport:
    """Leave the repository with the base commit, its ancestors and one branch, nothing else.

    In order: checks that HEAD is at the base; removes every remote; points one branch at the
    base and checks it out (the working tree and index are untouched); deletes every other ref
    (branches, tags, notes, stash, remote-tracking, replace refs, packed or loose); removes
    pseudo refs (`FETCH_HEAD`, `ORIG_HEAD`, ...), rerere's cache, grafts and filter-branch
    backups; expires and removes the reflogs; copies objects borrowed from alternates into the
    repository and drops the alternates; drops `.keep` markers; runs `git gc --prune=now`; then
    `assert_no_future_commits`.

    Args:
        sandbox: the agent's sandbox, before the agent's first command.
        repo_dir: the repository's directory inside the sandbox.
        base_commit: the task's base commit; HEAD must already be at it.
        branch: name of the branch left at the base; None keeps HEAD's current branch, or
            `main` when HEAD is detached.
        prune: run `git gc --prune=now`. Only tests turn it off, to see the audit fail.
        timeout: seconds allowed for each git script (gc of a large repository takes a while).

    Returns:
        What was removed and the final audit.

    Raises:
        GitHygieneError: when HEAD is not at the base, a git command fails, or a commit newer
            than the base survives.
    """
    repo = str(repo_dir)
    base = await _resolve_base(sandbox, repo, base_commit, timeout)

    head = await _run(sandbox, repo, "git rev-parse --verify HEAD", "reading HEAD", timeout)
    if head.strip() != base:
        raise GitHygieneError(
            f"HEAD of {repo} is at {head.strip()[:12]}, not at the base commit {base[:12]}; "
            "check out the base commit before scrubbing"
        )
    if branch is None:
        current = await _run(
            sandbox, repo, "git symbolic-ref --quiet --short HEAD || true", "reading HEAD", timeout
        )
        branch = current.strip() or "main"
    ref = f"refs/heads/{branch}"
    await _run(
        sandbox,
        repo,
        f"git check-ref-format {shlex.quote(ref)} || "
        f"{{ echo {shlex.quote('invalid branch name: ' + branch)} >&2; exit 3; }}",
        "checking the branch name",
        timeout,
    )

    # Listed before the remotes go, which takes their remote-tracking refs with them.
    listed = await _run(
        sandbox, repo, "git for-each-ref --format='%(refname)'", "listing refs", timeout
    )
    deleted = [name for name in listed.splitlines() if name and name != ref]
    remotes = (await _run(sandbox, repo, "git remote", "listing remotes", timeout)).split()
    if remotes:
        removal = " && ".join(f"git remote remove {shlex.quote(name)}" for name in remotes)
        await _run(sandbox, repo, removal, "removing remotes", timeout)

    await _run(
        sandbox,
        repo,
        f"git update-ref {shlex.quote(ref)} {base} && git symbolic-ref HEAD {shlex.quote(ref)}",
        f"pointing {ref} at the base",
        timeout,
    )
    if deleted:
        # Streamed inside the sandbox: repositories with many tags exceed argv limits.
        await _run(
            sandbox,
            repo,
            "git for-each-ref --format='delete %(refname)' | "
            f"grep -vxF {shlex.quote('delete ' + ref)} | git update-ref --no-deref --stdin",
            "deleting refs",
            timeout,
        )

    removed = await _run(
        sandbox,
        repo,
        f"""set -e
gd=$(git rev-parse --absolute-git-dir)
common=$(cd "$(git rev-parse --git-common-dir)" && pwd)
git reflog expire --expire=now --expire-unreachable=now --all
for name in {_PSEUDO_REFS}; do
  if [ -e "$gd/$name" ]; then echo "$name"; rm -rf "${{gd:?}}/$name"; fi
done
for name in {_COMMON_LEFTOVERS}; do rm -rf "${{common:?}}/$name"; done
rm -f "$common"/objects/pack/*.keep
if [ -s "$common/objects/info/alternates" ]; then
  git repack -a -d -q
  rm -f "$common/objects/info/alternates"
fi
""",
        "removing pseudo refs, reflogs and alternates",
        timeout,
    )
    deleted += removed.split()

    if prune:
        await _run(sandbox, repo, "git gc --prune=now --quiet", "git gc --prune=now", timeout)

    audit = await assert_no_future_commits(sandbox, repo, base, timeout=timeout)
    return HygieneReport(
        base_commit=base,
        branch=branch,
        removed_remotes=remotes,
        deleted_refs=deleted,
        pruned=prune,
        audit=audit,
    )
