"""The editor tool: numbered views, exact single replacements, inserts, per-file undo."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.bash_sandbox import BashSandbox

from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.tools.editor import EditorArgs, EditorTool
from uni_agent_core.tools.registry import ToolResult

SOURCE = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg" / "deep" / "deeper").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".hidden").write_text("")
    (root / "pkg" / "mod.py").write_text(SOURCE)
    (root / "pkg" / "deep" / "x.py").write_text("")
    (root / "pkg" / "deep" / "deeper" / "too_deep.py").write_text("")
    return root


def edit(editor: EditorTool, repo: Path, **fields: Any) -> ToolResult:
    sandbox: Sandbox = BashSandbox(repo)
    return asyncio.run(editor.run(sandbox, EditorArgs(**fields)))


def test_view_file_with_line_numbers_and_ranges(repo: Path) -> None:
    editor = EditorTool()
    full = edit(editor, repo, command="view", path="pkg/mod.py")
    assert not full.error
    assert full.output.splitlines()[0] == f"Lines 1-6 of {repo}/pkg/mod.py (6 lines):"
    assert full.output.splitlines()[1:3] == ["     1\tdef f():", "     2\t    return 1"]
    part = edit(editor, repo, command="view", path=f"{repo}/pkg/mod.py", view_range=[5, -1])
    assert part.output.splitlines()[1:] == ["     5\tdef g():", "     6\t    return 1"]
    bad = edit(editor, repo, command="view", path="pkg/mod.py", view_range=[3, 9])
    assert bad.error and "has 6 lines" in bad.output
    missing = edit(editor, repo, command="view", path="nope.py")
    assert missing.error and "does not exist" in missing.output


def test_view_directory_two_levels_without_hidden_items(repo: Path) -> None:
    listing = edit(EditorTool(), repo, command="view", path=".")
    assert not listing.error
    assert listing.output.splitlines()[1:] == [
        f"{repo}/pkg/",
        f"{repo}/pkg/deep/",
        f"{repo}/pkg/mod.py",
    ]


def test_str_replace_requires_exactly_one_occurrence(repo: Path) -> None:
    editor = EditorTool()
    target = repo / "pkg" / "mod.py"
    twice = edit(editor, repo, command="str_replace", path="pkg/mod.py", old_str="return 1")
    assert twice.error and "occurs 2 times" in twice.output and "lines [2, 6]" in twice.output
    absent = edit(editor, repo, command="str_replace", path="pkg/mod.py", old_str="return 2")
    assert absent.error and "does not occur verbatim" in absent.output
    assert target.read_text() == SOURCE

    done = edit(
        editor,
        repo,
        command="str_replace",
        path="pkg/mod.py",
        old_str="def g():\n    return 1",
        new_str="def g():\n    return 2",
    )
    assert not done.error
    assert target.read_text() == "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    assert "     6\t    return 2" in done.output


def test_insert_after_a_line(repo: Path) -> None:
    editor = EditorTool()
    target = repo / "pkg" / "mod.py"
    top = edit(
        editor, repo, command="insert", path="pkg/mod.py", insert_line=0, new_str="import os"
    )
    assert not top.error and target.read_text() == "import os\n" + SOURCE
    end = edit(editor, repo, command="insert", path="pkg/mod.py", insert_line=7, new_str="# end\n")
    assert not end.error and target.read_text().endswith("    return 1\n# end\n")
    past = edit(editor, repo, command="insert", path="pkg/mod.py", insert_line=99, new_str="x")
    assert past.error and "use a value from 0 to 8" in past.output


def test_create_and_undo_in_order(repo: Path) -> None:
    editor = EditorTool()
    new = repo / "pkg" / "new" / "file.py"
    created = edit(editor, repo, command="create", path="pkg/new/file.py", file_text="a = 1\n")
    assert not created.error and new.read_text() == "a = 1\n"
    again = edit(editor, repo, command="create", path="pkg/new/file.py", file_text="b")
    assert again.error and "already exists" in again.output
    edit(editor, repo, command="str_replace", path="pkg/new/file.py", old_str="1", new_str="2")
    edit(editor, repo, command="insert", path="pkg/new/file.py", insert_line=1, new_str="b = 3")
    assert new.read_text() == "a = 2\nb = 3\n"

    assert not edit(editor, repo, command="undo", path="pkg/new/file.py").error
    assert new.read_text() == "a = 2\n"
    edit(editor, repo, command="undo", path="pkg/new/file.py")
    assert new.read_text() == "a = 1\n"
    removed = edit(editor, repo, command="undo", path=str(new))  # same file, absolute path
    assert "creation" in removed.output and not new.exists()
    nothing = edit(editor, repo, command="undo", path="pkg/new/file.py")
    assert nothing.error and "No edit" in nothing.output


def test_paths_that_are_not_files(repo: Path) -> None:
    editor = EditorTool()
    on_dir = edit(editor, repo, command="str_replace", path="pkg", old_str="x")
    assert on_dir.error and "is a directory" in on_dir.output
    missing = edit(editor, repo, command="insert", path="gone.py", insert_line=0, new_str="x")
    assert missing.error and "use `create`" in missing.output


def test_unreadable_files_are_observations(repo: Path) -> None:
    (repo / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    result = edit(EditorTool(), repo, command="view", path="blob.bin")
    assert result.error and result.output.startswith(f"Cannot read {repo}/blob.bin")


def test_arguments_are_checked_per_command() -> None:
    with pytest.raises(ValidationError, match="`file_text` is required for command `create`"):
        EditorArgs(command="create", path="a.py")
    with pytest.raises(ValidationError, match="`insert_line` and `new_str` are required"):
        EditorArgs(command="insert", path="a.py")
    with pytest.raises(ValidationError, match="must not be empty"):
        EditorArgs(command="str_replace", path="a.py", old_str="")
    with pytest.raises(ValidationError, match="command"):
        EditorArgs(command="delete", path="a.py")  # type: ignore[arg-type]


def test_schema_lists_commands_and_field_docs() -> None:
    params = EditorTool().schema()["function"]["parameters"]
    assert params["required"] == ["command", "path"]
    assert params["properties"]["command"]["enum"] == [
        "view",
        "create",
        "str_replace",
        "insert",
        "undo",
    ]
    assert "exactly" in params["properties"]["old_str"]["description"]
    assert params["properties"]["view_range"]["type"] == "array"
    assert "anyOf" not in str(params)
