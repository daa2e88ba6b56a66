"""Unified diffs in git's format: writing them from file contents, and reading what they touch.

The micro-swe generator writes its gold and test patches with `unified_patch`; the verifier and
the data validator read which files a patch touches (`patched_files`) and its added lines
(`added_lines`) without applying it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_PLUS_HEADER = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.M)
HUNK_HEADER = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)


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
