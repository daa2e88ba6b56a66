"""Host-side access to a local sandbox's workspace: path confinement, copies, removal.

The local sandbox reads and writes its workspace directly on the host, so every sandbox path is
confined first: `..`, absolute paths outside the workspace and symlinks that lead out of it are
refused with `PermissionError` (a symlink inside the sandbox could otherwise make the host read
or overwrite any host file), and copies never follow a link inside the tree they copy into.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath


def confine(path: str, *, workdir: PurePosixPath, mount: PurePosixPath, host: Path) -> Path:
    """The host path of a sandbox path, refusing anything outside the workspace.

    Args:
        path: A sandbox path; relative paths are relative to `workdir`.
        workdir: The working directory in the sandbox's namespace.
        mount: Where the workspace is in the sandbox's namespace.
        host: The workspace's directory on the host.

    Raises:
        PermissionError: The path, lexically or through a symlink, leaves the workspace.
    """
    normalized = PurePosixPath(posixpath.normpath(workdir / path))
    if normalized != mount and mount not in normalized.parents:
        raise PermissionError(f"{path!r} is outside the sandbox workspace {mount}")
    workspace = Path(os.path.realpath(host))
    resolved = Path(os.path.realpath(workspace / normalized.relative_to(mount)))
    if resolved != workspace and workspace not in resolved.parents:
        raise PermissionError(f"{path!r} leads out of the sandbox workspace through a symlink")
    return resolved


def copy_path(source: Path, target: Path) -> None:
    """Copies a file, or a directory into `target`, never following a link on either side.

    Links in `source` are copied as links. A link already in `target` (one an agent made, to a
    host path say) is replaced by what is copied, not written through, and so is an entry of
    the other kind (a file where a directory is copied, or the reverse).
    """
    if source.is_dir() and not source.is_symlink():
        _copy_tree(source, target)
    else:
        _copy_entry(source, target)


def _copy_tree(source: Path, target: Path) -> None:
    _clear_unless_directory(target)
    target.mkdir(parents=True, exist_ok=True)
    with os.scandir(source) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _copy_tree(Path(entry.path), target / entry.name)
            else:
                _copy_entry(Path(entry.path), target / entry.name)
    shutil.copystat(source, target, follow_symlinks=False)


def _copy_entry(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        force_rmtree(target)
    shutil.copy2(source, target, follow_symlinks=False)


def _clear_unless_directory(path: Path) -> None:
    """Removes `path` unless it is a real directory (a link to one counts as a link)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()


def force_rmtree(path: Path) -> None:
    """Removes a tree even where sandboxed commands took write permission off directories."""

    def make_writable_and_retry(fn: Callable[[str], object], failed: str, _: object) -> None:
        parent = os.path.dirname(failed)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, os.stat(failed).st_mode | stat.S_IRWXU)
        fn(failed)

    shutil.rmtree(path, onerror=make_writable_and_retry)
