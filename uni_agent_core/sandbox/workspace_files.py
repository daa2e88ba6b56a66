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
    """Removes a tree whatever permissions sandboxed commands left in it.

    An agent may take read, search or write permission off any directory it made (`chmod 000
    x`); as a non-root host user, that stops a plain `shutil.rmtree`. Where removal fails, the
    failed entry's directory and, for a directory, everything under it are given back their
    owner's permissions (links are never followed), and it is removed again. Nothing outside the
    tree is touched.
    """
    root = os.path.abspath(path)

    def retry_with_owner_access(_: Callable[..., object], failed: str, __: object) -> None:
        # whatever step failed (opening, listing, unlinking): restore access, remove again
        parent = os.path.dirname(failed)
        if parent == root or parent.startswith(root + os.sep):
            _grant_owner_access(parent)
        if not os.path.lexists(failed):
            return
        if os.path.isdir(failed) and not os.path.islink(failed):
            _restore_owner_access(failed)
            shutil.rmtree(failed)
        else:
            os.unlink(failed)

    shutil.rmtree(root, onerror=retry_with_owner_access)


def _grant_owner_access(directory: str) -> int:
    """Gives `directory` read, write and search permission for its owner; returns its mode
    (not a directory: unchanged)."""
    mode = os.lstat(directory).st_mode
    if stat.S_ISDIR(mode) and mode & stat.S_IRWXU != stat.S_IRWXU:
        os.chmod(directory, mode | stat.S_IRWXU)
    return mode


def _restore_owner_access(root: str) -> None:
    """`_grant_owner_access` on every directory under `root` (itself included), top-down, so
    that each is listable before it is walked."""
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            if not stat.S_ISDIR(_grant_owner_access(directory)):
                continue
            with os.scandir(directory) as entries:
                pending.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue  # gone, replaced, or not ours: removal says what it cannot do
