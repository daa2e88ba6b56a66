"""Unified diffs in git's format: writing them from file contents, and reading what they touch.

The micro-swe generator writes its gold and test patches with `unified_patch`; the verifier and
the data validator read which files a patch touches (`patched_files`) and its added lines
(`added_lines`) without applying it; the warm start reads the one line a gold patch replaces
(`single_line_change`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_PLUS_HEADER = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.M)
HUNK_HEADER = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_HUNK_OLD_START = re.compile(r"^@@ -(\d+)")


def unified_patch(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """A git-style patch that turns the files `before` into `after` (paths relative to the repo).

    Files only in `after` are created, files only in `before` deleted; unchanged files are left
    out. Every file must end with a newline (the generator's files do).

    Raises:
        ValueError: a file does not end with a newline.
    """
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        for label, text in (("before", old), ("after", new)):
            if text is not None and text and not text.endswith("\n"):
                raise ValueError(f"{path} ({label}) must end with a newline")
        header = [f"diff --git a/{path} b/{path}\n"]
        if old is None:
            header.append("new file mode 100644\n")
        elif new is None:
            header.append("deleted file mode 100644\n")
        body = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile="/dev/null" if old is None else f"a/{path}",
            tofile="/dev/null" if new is None else f"b/{path}",
        )
        chunks.append("".join(header) + "".join(body))
    return "".join(chunks)


def patched_files(patch: str) -> list[str]:
    """Paths a patch touches (new paths for renames), in order, without duplicates."""
    paths = [match.group(2) for match in _DIFF_HEADER.finditer(patch)]
    if not paths:
        paths = [p for p in _PLUS_HEADER.findall(patch) if p != "/dev/null"]
    return list(dict.fromkeys(paths))


def added_lines(patch: str) -> list[str]:
    """The lines a patch adds (without the leading `+`), headers excluded."""
    return [
        line[1:]
        for line in patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]


def removed_lines(patch: str) -> list[str]:
    """The lines a patch removes (without the leading `-`), headers excluded."""
    return [
        line[1:]
        for line in patch.splitlines()
        if line.startswith("-") and not line.startswith("---")
    ]


@dataclass(frozen=True)
class LineChange:
    """One line of one file replaced by another."""

    path: str
    line: int
    """1-based number of the replaced line in the original file."""
    old: str
    new: str


def single_line_change(patch: str) -> LineChange | None:
    """The line a patch replaces, when it touches one file and replaces exactly one line."""
    files = patched_files(patch)
    if len(files) != 1:
        return None
    removed, added, number, line = [], [], 0, 0
    for text in patch.splitlines():
        hunk = _HUNK_OLD_START.match(text)
        if hunk:
            line = int(hunk.group(1))
        elif not line:  # the diff's headers, before the first hunk
            continue
        elif text.startswith("-"):
            removed.append(text[1:])
            number = line
            line += 1
        elif text.startswith("+"):
            added.append(text[1:])
        else:
            line += 1
    if len(removed) != 1 or len(added) != 1:
        return None
    return LineChange(files[0], number, removed[0], added[0])
