"""The `editor` tool: view, create and edit files by exact string replacement, with undo.

Modelled on SWE-agent's `str_replace_editor`. Relative paths are resolved against the sandbox's
`workdir`. File contents travel through `Sandbox.read_file`/`write_file`; only probes (does the
path exist, is it a directory), directory listings, `mkdir -p` and removals use `exec`.

Every successful `create`, `str_replace` and `insert` pushes the file's previous content (None
for a file that did not exist) onto that file's history; `undo` pops it. The history belongs to
the tool instance, i.e. to one episode; edits made meanwhile with the shell are overwritten by
an `undo`. Lines are split on `\\n` only and numbered from 1.
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Literal

from pydantic import Field, model_validator

from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.tools.registry import Tool, ToolArgs, ToolResult

EditorCommand = Literal["view", "create", "str_replace", "insert", "undo"]
"""What the editor can do."""

PathKind = Literal["file", "directory", "other", "missing"]

_SNIPPET_CONTEXT = 4
"""Lines shown around an edit."""

_REQUIRED: dict[str, tuple[str, ...]] = {
    "create": ("file_text",),
    "str_replace": ("old_str",),
    "insert": ("insert_line", "new_str"),
}


class EditorArgs(ToolArgs):
    """Arguments of `editor`; which fields are needed depends on `command`."""

    command: EditorCommand
    """`view` a file (with line numbers) or a directory (two levels), `create` a new file,
    `str_replace` one exact occurrence of `old_str` by `new_str`, `insert` `new_str` after line
    `insert_line`, or `undo` the last edit of the file at `path`."""
    path: str = Field(min_length=1)
    """File or directory, absolute or relative to the repository root."""
    file_text: str | None = None
    """`create`: the whole content of the new file."""
    old_str: str | None = None
    """`str_replace`: the exact text to replace, whitespace included; it must occur exactly
    once in the file (add surrounding lines to make it unique)."""
    new_str: str | None = None
    """`str_replace`: the replacement (omit it to delete `old_str`); `insert`: the text to
    insert."""
    insert_line: int | None = Field(default=None, ge=0)
    """`insert`: the line after which `new_str` goes; 0 inserts at the top of the file."""
    view_range: list[int] | None = Field(default=None, min_length=2, max_length=2)
    """`view` of a file: `[first, last]` line numbers to show, 1-based and inclusive; `last` may
    be -1 for the end of the file. Omit it to see the whole file."""

    @model_validator(mode="after")
    def _check_command_fields(self) -> EditorArgs:
        missing = [name for name in _REQUIRED.get(self.command, ()) if getattr(self, name) is None]
        if missing:
            fields = " and ".join(f"`{name}`" for name in missing)
            raise ValueError(
                f"{fields} {'is' if len(missing) == 1 else 'are'} required for "
                f"command `{self.command}`"
            )
        if self.command == "str_replace" and self.old_str == "":
            raise ValueError("`old_str` must not be empty for command `str_replace`")
        return self


class EditorTool(Tool[EditorArgs]):
    """View and edit files in the sandbox, one exact replacement at a time, with per-file undo."""

    name = "editor"
    description = (
        "View, create and edit files. `view` shows a file with line numbers (or lists a "
        "directory two levels deep); `create` writes a new file; `str_replace` replaces the "
        "single exact occurrence of `old_str` with `new_str`; `insert` adds `new_str` after line "
        "`insert_line`; `undo` reverts the last edit of a file."
    )
    args_model = EditorArgs

    def __init__(self, *, timeout_s: float = 30.0) -> None:
        """Create an editor with an empty undo history.

        Args:
            timeout_s: timeout of each sandbox command the editor runs (probes, listings).

        Raises:
            ValueError: on a non-positive timeout.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._history: dict[str, list[str | None]] = {}

    async def run(self, sandbox: Sandbox, args: EditorArgs) -> ToolResult:
        """Carry out one editor command.

        Args:
            sandbox: the episode's sandbox.
            args: the validated command and its fields.

        Returns:
            The view or a confirmation with a snippet; `error=True` with an explanation when the
            path or the arguments do not fit the file.

        Raises:
            SandboxError: when a probe command fails or times out.
        """
        path = posixpath.normpath(posixpath.join(str(sandbox.workdir), args.path))
        kind = await self._kind(sandbox, path)
        if args.command == "create":
            return await self._create(sandbox, path, kind, args.file_text or "")
        if args.command == "view" and kind == "directory":
            if args.view_range is not None:
                return _error(f"{path} is a directory; `view_range` only applies to files.")
            return await self._list(sandbox, path)
        if args.command == "undo":
            return await self._undo(sandbox, path)
        if kind != "file":
            return _error(_not_a_file(path, kind, args.command))
        try:
            content = await sandbox.read_file(path)
        except (OSError, UnicodeDecodeError) as exc:
            # A bad path is the model's mistake (outside the workspace, unreadable, binary).
            return _error(f"Cannot read {path}: {exc}")
        if args.command == "view":
            return _view(path, content, args.view_range)
        if args.command == "str_replace":
            return await self._str_replace(
                sandbox, path, content, args.old_str or "", args.new_str or ""
            )
        return await self._insert(sandbox, path, content, args.insert_line or 0, args.new_str or "")

    async def _exec(self, sandbox: Sandbox, command: str) -> str:
        result = await sandbox.exec(command, timeout=self.timeout_s)
        if not result.ok:
            what = "timed out" if result.timed_out else f"exited with {result.exit_code}"
            raise SandboxError(
                f"editor command {command!r} {what}: {(result.stderr or result.stdout).strip()}"
            )
        return result.stdout

    async def _kind(self, sandbox: Sandbox, path: str) -> PathKind:
        q = shlex.quote(path)
        out = await self._exec(
            sandbox,
            f"if [ -d {q} ]; then echo directory; elif [ -f {q} ]; then echo file; "
            f"elif [ -e {q} ]; then echo other; else echo missing; fi",
        )
        kind = out.strip()
        if kind not in ("file", "directory", "other", "missing"):
            raise SandboxError(f"unexpected answer {kind!r} probing {path}")
        return kind  # type: ignore[return-value]

    async def _list(self, sandbox: Sandbox, path: str) -> ToolResult:
        listing = await self._exec(
            sandbox,
            f"cd {shlex.quote(path)} && find . -mindepth 1 -maxdepth 2 -not -path '*/.*' "
            r"\( -type d -exec printf '%s/\n' {} + -o -print \) | LC_ALL=C sort",
        )
        entries = [f"{path.rstrip('/')}/{line[2:]}" for line in listing.splitlines() if line]
        header = f"Files and directories up to 2 levels deep in {path}, hidden items excluded:"
        return ToolResult(output="\n".join([header, *entries]) if entries else f"{header}\n(empty)")

    async def _write(
        self, sandbox: Sandbox, path: str, old: str | None, new: str
    ) -> ToolResult | None:
        try:
            await sandbox.write_file(path, new)
        except OSError as exc:
            return _error(f"Cannot write {path}: {exc}")
        self._history.setdefault(path, []).append(old)
        return None

    async def _create(self, sandbox: Sandbox, path: str, kind: PathKind, text: str) -> ToolResult:
        if kind != "missing":
            hint = "use `str_replace` or `insert` to edit it" if kind == "file" else "pick a path"
            return _error(f"Cannot create {path}: it already exists as a {kind}; {hint}.")
        await self._exec(sandbox, f"mkdir -p {shlex.quote(posixpath.dirname(path))}")
        if failed := await self._write(sandbox, path, None, text):
            return failed
        return ToolResult(output=f"File created at {path} ({len(_lines(text))} lines).")

    async def _str_replace(
        self, sandbox: Sandbox, path: str, content: str, old: str, new: str
    ) -> ToolResult:
        starts = occurrences(content, old)
        if not starts:
            return _error(
                f"No replacement was performed: `old_str` does not occur verbatim in {path}. "
                "Check whitespace and indentation with `view`."
            )
        if len(starts) > 1:
            lines = [content.count("\n", 0, start) + 1 for start in starts]
            return _error(
                f"No replacement was performed: `old_str` occurs {len(starts)} times in {path}, "
                f"starting at lines {lines}. Include more surrounding lines to make it unique."
            )
        updated = content[: starts[0]] + new + content[starts[0] + len(old) :]
        if failed := await self._write(sandbox, path, content, updated):
            return failed
        first = content.count("\n", 0, starts[0]) + 1
        return _edited(path, updated, first, first + new.count("\n"))

    async def _insert(
        self, sandbox: Sandbox, path: str, content: str, after: int, text: str
    ) -> ToolResult:
        lines = _lines(content)
        if after > len(lines):
            return _error(
                f"`insert_line` {after} is past the end of {path}, which has {len(lines)} lines; "
                f"use a value from 0 to {len(lines)}."
            )
        if text and not text.endswith("\n"):
            text += "\n"
        head = lines[:after]
        if head and not head[-1].endswith("\n"):
            head[-1] += "\n"
        updated = "".join(head) + text + "".join(lines[after:])
        if failed := await self._write(sandbox, path, content, updated):
            return failed
        return _edited(path, updated, after + 1, after + max(text.count("\n"), 1))

    async def _undo(self, sandbox: Sandbox, path: str) -> ToolResult:
        history = self._history.get(path)
        if not history:
            return _error(f"No edit of {path} to undo.")
        previous = history.pop()
        if previous is None:
            await self._exec(sandbox, f"rm -f {shlex.quote(path)}")
            return ToolResult(output=f"Undid the creation of {path}; the file is removed.")
        await sandbox.write_file(path, previous)
        return ToolResult(
            output=f"Undid the last edit of {path}; it has {len(_lines(previous))} lines again."
        )


def _error(message: str) -> ToolResult:
    return ToolResult(output=message, error=True)


def _not_a_file(path: str, kind: PathKind, command: str) -> str:
    if kind == "missing":
        return f"The path {path} does not exist; use `create` to make a new file."
    if kind == "directory":
        return f"{path} is a directory; `{command}` needs a file."
    return f"{path} is not a regular file; `{command}` needs a file."


def _lines(content: str) -> list[str]:
    """`content` split after each `\\n`, ends kept (unlike `splitlines`, only `\\n` counts)."""
    parts = content.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def occurrences(content: str, needle: str) -> list[int]:
    """Start offsets of `needle` in `content`, overlapping matches included: `str_replace`
    edits only when there is exactly one."""
    starts: list[int] = []
    start = content.find(needle)
    while start != -1:
        starts.append(start)
        start = content.find(needle, start + 1)
    return starts


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{first + i:6}\t{line.rstrip(chr(10))}" for i, line in enumerate(lines))


def _view(path: str, content: str, view_range: list[int] | None) -> ToolResult:
    lines = _lines(content)
    if not lines:
        return ToolResult(output=f"{path} is empty.")
    first, last = 1, len(lines)
    if view_range is not None:
        first, last = view_range
        last = len(lines) if last == -1 else last
        if not 1 <= first <= len(lines) or not first <= last <= len(lines):
            return _error(
                f"Invalid `view_range` {view_range}: {path} has {len(lines)} lines; use "
                f"[first, last] with 1 <= first <= last <= {len(lines)}, or last = -1."
            )
    body = _numbered(lines[first - 1 : last], first)
    return ToolResult(output=f"Lines {first}-{last} of {path} ({len(lines)} lines):\n{body}")


def _edited(path: str, content: str, first: int, last: int) -> ToolResult:
    lines = _lines(content)
    start = max(first - _SNIPPET_CONTEXT, 1)
    stop = min(last + _SNIPPET_CONTEXT, len(lines))
    snippet = _numbered(lines[start - 1 : stop], start) if lines else "(the file is now empty)"
    return ToolResult(
        output=(
            f"Edited {path}. Lines {start}-{stop} now read:\n{snippet}\n"
            "Review the change; `undo` reverts it."
        )
    )
