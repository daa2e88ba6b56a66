"""Unified diffs in git's format: writing them from file contents, and reading what they touch.

The micro-swe generator writes its gold and test patches with `unified_patch`; the verifier and
the data validator read which files a patch touches (`patched_files`) and its added lines
(`added_lines`) without applying it; the warm start reads the one block of lines a gold patch
replaces (`single_block_change`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_PLUS_HEADER = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.M)
HUNK_HEADER = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_HUNK_OLD_SIDE = re.compile(r"^@@ -(\d+)(?:,(\d+))?")


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
class BlockChange:
    """Consecutive lines of one file replaced by others; either side may be empty (a pure
    insertion or deletion)."""

    path: str
    line: int
    """1-based number, in the original file, of the first replaced line; for a pure insertion,
    of the line the new lines go before (one past the last line at the end of the file)."""
    old: tuple[str, ...]
    """The replaced lines, without their newlines."""
    new: tuple[str, ...]
    """The lines put in their place, without their newlines."""
    hunk_start: int
    """1-based number, in the original file, of the first line of `hunk_old`."""
    hunk_old: tuple[str, ...]
    """The original lines the block's hunk shows: its context lines and `old`, in order."""


def single_block_change(patch: str) -> BlockChange | None:
    """The one block of consecutive lines a patch changes, when it touches one file in one place
    (one run of removed and added lines, however long); None for any other patch."""
    files = patched_files(patch)
    if len(files) != 1:
        return None
    blocks: list[tuple[int, list[str], list[str], int]] = []
    hunks: list[tuple[int, list[str]]] = []
    in_block, line = False, 0
    for text in patch.splitlines():
        hunk = _HUNK_OLD_SIDE.match(text)
        if hunk:
            # an empty old side (`-4,0`) is numbered by the line before it
            start = int(hunk.group(1))
            line, in_block = start + 1 if hunk.group(2) == "0" else start, False
            hunks.append((line, []))
        elif not line or text.startswith("\\"):  # headers before the first hunk; "\ No newline"
            continue
        elif text.startswith(("-", "+")):
            if not in_block:
                blocks.append((line, [], [], len(hunks) - 1))
                in_block = True
            _, removed, added, _ = blocks[-1]
            (removed if text[0] == "-" else added).append(text[1:])
            if text[0] == "-":
                hunks[-1][1].append(text[1:])
                line += 1
        else:
            hunks[-1][1].append(text[1:])
            line, in_block = line + 1, False
    if len(blocks) != 1:
        return None
    first, old, new, hunk_index = blocks[0]
    hunk_start, hunk_old = hunks[hunk_index]
    return BlockChange(files[0], first, tuple(old), tuple(new), hunk_start, tuple(hunk_old))
