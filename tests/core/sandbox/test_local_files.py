"""LocalSandbox file calls and `diff()`: workspace confinement, copies, the working-tree patch."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Literal

import pytest

from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.sandbox.local import LocalSandbox

Isolation = Literal["bubblewrap", "none"]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
ISOLATIONS = [pytest.param("bubblewrap", marks=needs_bwrap), "none"]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_file_calls_round_trip_and_commands_see_them(tmp_path: Path, isolation: Isolation) -> None:
    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), isolation=isolation) as sb:
            await sb.write_file("src/app.py", "print('hi')\n")
            assert await sb.read_file(str(sb.workdir / "src" / "app.py")) == "print('hi')\n"
            result = await sb.exec("cat src/app.py && echo más > out.txt")
            assert result.stdout == "print('hi')\n"
            assert await sb.read_file("out.txt") == "más\n"
            await sb.write_file("../notes.txt", "top of the workspace")
            assert (sb.host_dir / "workspace" / "notes.txt").read_text() == "top of the workspace"

    asyncio.run(main())


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_upload_and_download_copy_files_and_trees(tmp_path: Path, isolation: Isolation) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    (source / "README").write_text("readme\n")
    roots = tmp_path / "sandboxes"
    roots.mkdir()

    async def main() -> None:
        async with LocalSandbox(root_dir=str(roots), isolation=isolation) as sb:
            await sb.upload(str(source), "project")
            await sb.upload(str(source / "README"), "copy/README")
            result = await sb.exec("cat project/pkg/mod.py copy/README && echo y > project/new")
            assert result.stdout == "x = 1\nreadme\n"
            await sb.download("project", str(tmp_path / "out"))
            await sb.download("copy/README", str(tmp_path / "single" / "README"))
        assert (tmp_path / "out" / "pkg" / "mod.py").read_text() == "x = 1\n"
        assert (tmp_path / "out" / "new").read_text() == "y\n"
        assert (tmp_path / "single" / "README").read_text() == "readme\n"

    asyncio.run(main())


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_directory_upload_never_writes_through_links_in_the_target(
    tmp_path: Path, isolation: Isolation
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.txt").write_text("host data\n")
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "planted.txt").write_text("from the upload\n")
    (source / "config.txt").write_text("uploaded config\n")
    roots = tmp_path / "sandboxes"
    roots.mkdir()

    async def main() -> None:
        async with LocalSandbox(root_dir=str(roots), isolation=isolation) as sb:
            # What an agent can do: links in its workspace that lead to host paths.
            await sb.exec(f"mkdir -p project && ln -s {victim} project/sub")
            await sb.exec(f"ln -s {victim / 'config.txt'} project/config.txt")
            await sb.upload(str(source), "project")
            result = await sb.exec("cat project/sub/planted.txt project/config.txt")
            assert result.stdout == "from the upload\nuploaded config\n"
            assert not (sb.host_dir / "workspace" / "repo" / "project" / "sub").is_symlink()

    asyncio.run(main())
    assert sorted(p.name for p in victim.iterdir()) == ["config.txt"]
    assert (victim / "config.txt").read_text() == "host data\n"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_paths_that_leave_the_workspace_are_refused(tmp_path: Path, isolation: Isolation) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    roots = tmp_path / "sandboxes"
    roots.mkdir()

    async def main() -> None:
        async with LocalSandbox(root_dir=str(roots), isolation=isolation) as sb:
            for path in ("../../etc/passwd", "/etc/passwd", str(secret), "/workspace/../etc/x"):
                with pytest.raises(PermissionError, match="outside the sandbox workspace"):
                    await sb.read_file(path)
                with pytest.raises(PermissionError):
                    await sb.write_file(path, "pwned")
            with pytest.raises(PermissionError):
                await sb.download("../../../etc", str(tmp_path / "etc"))
            with pytest.raises(PermissionError):
                await sb.upload(str(secret), "/tmp/secret.txt")
            # Symlinks made inside the sandbox must not lead the host's file calls out of it.
            depth = "../" * 20
            made = await sb.exec(f"ln -s {secret} abs && ln -s {depth}{secret} rel")
            assert made.ok, made
            for link in ("abs", "rel", "rel/../abs"):
                with pytest.raises(PermissionError):
                    await sb.read_file(link)
                with pytest.raises(PermissionError):
                    await sb.write_file(link, "pwned")
        assert secret.read_text() == "host secret"

    asyncio.run(main())


@needs_git
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_diff_is_the_working_tree_patch_with_new_files(
    tmp_path: Path, isolation: Isolation
) -> None:
    setup = (
        "git init -q && printf 'one\\ntwo\\n' > a.txt && printf 'build/\\n' > .gitignore && "
        "git add -A && git -c user.name=t -c user.email=t@t commit -qm base && "
        "printf 'one\\nTWO\\n' > a.txt && echo new > b.txt && mkdir build && echo o > build/x"
    )

    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), isolation=isolation) as sb:
            assert (await sb.exec(setup)).ok
            patch = await sb.diff()
            assert "-two\n+TWO\n" in patch
            assert "diff --git a/b.txt b/b.txt\nnew file mode 100644" in patch
            assert "build/x" not in patch
            # The repo's own index is untouched: b.txt is still untracked.
            status = await sb.exec("git status --porcelain")
            assert status.stdout.splitlines() == [" M a.txt", "?? b.txt"]
            applied = await sb.exec(
                "git stash -u -q && git apply --check - <<'EOF'\n" + patch + "EOF\n"
            )
            assert applied.ok, applied

    asyncio.run(main())


@needs_git
def test_diff_sees_a_same_size_rewrite_whose_stat_data_matches_the_index(tmp_path: Path) -> None:
    """A rewrite git's stat cache would call clean (same size, mtime restored, ctime ignored)
    is still in the patch: the diff compares contents, not the repository index's stat data."""
    setup = (
        "git init -q && git config core.trustctime false && printf 'x = 1\\n' > a.py && "
        "touch -d 2001-01-01T00:00:00 a.py && git add -A && "
        "git -c user.name=t -c user.email=t@t commit -qm base && "
        "printf 'x = 2\\n' > a.py && touch -d 2001-01-01T00:00:00 a.py && "
        'test -z "$(git status --porcelain)"'
    )

    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), isolation="none") as sb:
            prepared = await sb.exec(setup)
            assert prepared.ok, prepared  # git's own status misses the rewrite
            assert "-x = 1\n+x = 2\n" in await sb.diff()

    asyncio.run(main())


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_diff_outside_a_repository_raises(tmp_path: Path, isolation: Isolation) -> None:
    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), isolation=isolation) as sb:
            with pytest.raises(SandboxError, match="git diff"):
                await sb.diff()

    asyncio.run(main())
