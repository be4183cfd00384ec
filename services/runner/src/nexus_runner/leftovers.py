"""Clearing what a dead attempt left at the run's workspace path, so attempt n+1 starts from
an empty directory (then its last checkpoint, if any) instead of failing on it (issue 36).

Only what is beneath the path is touched, never anything a symbolic link points to: a link
planted as the workspace path is unlinked, not followed; links inside are removed as links
(the walk opens directories `O_NOFOLLOW` relative to their parent's fd, as `shutil.rmtree`
does). The dead attempt's tools may have left directories they made unwritable (or
unreadable) to their owner, the run; those are made 0o700 first, through fds opened without
following links, so removing their entries cannot fail on their mode.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def clear_workspace(root: Path) -> bool:
    """Empty the directory at `root`, keeping the directory itself (in a confined runner it
    is a bind mount, which cannot be removed); a link or a file there is removed as the entry
    it is. True if there was something. Raises `OSError` when it cannot be cleared."""
    try:
        mode = os.lstat(root).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):  # a link (to anywhere) or a file: the entry itself goes
        root.unlink()
        return True
    _unlock_tree(root)
    fd = _open_dir(root, None)
    if fd is None:  # swapped for a link since the lstat: that entry goes, never its target
        root.unlink()
        return True
    try:
        names = os.listdir(fd)
        for name in names:
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)
    return bool(names)


def _open_dir(name: str | Path, dir_fd: int | None) -> int | None:
    """A directory's fd, made 0o700 first if its mode kept its owner out; None when `name`
    is no longer a directory (a link, a file: rmtree removes those as entries)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        # Unreadable to its owner: chmod by name. lstat just said it is a directory, and
        # nobody is left to swap it for a link: the attempt that wrote here is dead.
        if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            return None
        os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:  # gone, or a link (ELOOP) or a file put there since the scan
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
        raise


def _unlock_tree(root: Path) -> None:
    """Every directory beneath `root` (and `root`) readable, writable and searchable by its
    owner, walked through fds without following symbolic links."""
    top = _open_dir(root, None)
    if top is not None:
        _unlock(top)


def _unlock(fd: int) -> None:
    """Depth first, as `shutil.rmtree` walks: open fds are bounded by the tree's depth, not
    its width (a clone's ``.git/objects`` has 256 directories side by side). Closes `fd`."""
    try:
        os.fchmod(fd, stat.S_IRWXU)
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                child = _open_dir(entry.name, fd)
                if child is not None:
                    _unlock(child)
    finally:
        os.close(fd)
