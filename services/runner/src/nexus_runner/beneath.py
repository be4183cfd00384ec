"""Opens paths beneath the workspace root atomically: every step is an ``openat`` from a
directory fd already held, and no step follows a symlink, so a directory swapped for a link
while a call runs cannot lead the call out of the root.

Symlinks inside the workspace are resolved here, not by the kernel: the link is read
(``readlinkat``), its target spliced into the canonical path walked so far, and the walk
starts again from the root's fd (at most `MAX_HOPS` links). A target outside the root, or
``..`` above it, is a `PathEscape`. The path every check sees (``.git``, a token's glob) is
the canonical workspace-relative path of what is actually opened.

Regular files with more than one hard link are refused: the other name may be outside the
workspace, and the kernel cannot say where. Errors are `PathEscape`, `ToolError` or the
`OSError` of the failing step (callers translate those at the tool boundary).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from nexus_runner.errors import PathEscape, ToolError

# Links followed in one call before giving up: Linux's own MAXSYMLINKS.
MAX_HOPS = 40
# Steps of one walk of the parents (components, links, retries) before it gives up.
_MAX_STEPS = 4 * MAX_HOPS + 256
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted in the workspace must not hang the call on open (it is refused
# as not a regular file right after); on regular files the flag does nothing.
_FILE = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_MODES = {"read": os.O_RDONLY, "write": os.O_WRONLY, "edit": os.O_RDWR}

Mode = Literal["read", "write", "edit"]
# Called with the canonical workspace-relative path before anything is read or created;
# raises to refuse (a token's glob, for sandboxed tools).
Check = Callable[[str], None]


@dataclass(frozen=True)
class Opened:
    """An fd opened beneath the root, and the canonical relative path it was opened as."""

    fd: int
    rel: str


def parts_of(path: str) -> list[str]:
    """The components of a workspace-relative path; refuses absolute paths and ``..``."""
    if not path or path.strip() == "":
        return []
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        raise PathEscape(f"absolute paths are not allowed: {path!r} (use a relative path)")
    if ".." in pure.parts:
        raise PathEscape(f"'..' is not allowed in paths: {path!r}")
    if "\x00" in path:
        raise PathEscape(f"a NUL byte is not allowed in paths: {path!r}")
    return list(pure.parts)


def _rel(parts: list[str]) -> str:
    return "/".join(parts) or "."


def _no_git(path: str, parts: list[str]) -> None:
    if parts and parts[0] == ".git":
        raise PathEscape(f"{path!r} is inside .git; use the git tools instead")


class _Walk:
    """One walk from the root's fd; `fd` is the canonical directory `done` names."""

    def __init__(self, root: Path, path: str) -> None:
        self.root = root
        self.path = path
        self.hops = 0
        self.done: list[str] = []
        self.pending = parts_of(path)  # before any fd is held: a refusal leaks none
        self.root_fd = os.open(root, _DIR)
        try:
            self.fd = os.dup(self.root_fd)
        except OSError:
            os.close(self.root_fd)
            raise

    def close(self) -> None:
        for fd in (self.fd, self.root_fd):
            with suppress(OSError):
                os.close(fd)

    def canonical(self) -> list[str]:
        """Where the walk is going, as far as it knows: what exists is canonical already,
        what does not yet exist cannot be a link."""
        return self.done + self.pending

    def follow(self, name: str) -> bool:
        """If `name` (in the current directory) is a symlink, splice its target into the
        path and restart from the root; False when it is not a link (anymore)."""
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return False  # not a link, or gone: the caller reports its own error
            raise
        self.hops += 1
        if self.hops > MAX_HOPS:
            raise ToolError(f"{self.path}: too many levels of symbolic links")
        if target.startswith("/"):
            inside = PurePosixPath(target)
            if (
                inside != PurePosixPath(self.root)
                and PurePosixPath(self.root) not in inside.parents
            ):
                raise PathEscape(f"{self.path!r} resolves outside the workspace")
            spliced = list(inside.relative_to(self.root).parts)
        else:
            spliced = [*self.done, *PurePosixPath(target).parts]
        resolved: list[str] = []
        for part in [*spliced, *self.pending[1:]]:
            if part == "..":
                if not resolved:
                    raise PathEscape(f"{self.path!r} resolves outside the workspace")
                resolved.pop()
            elif part not in (".", ""):
                resolved.append(part)
        os.close(self.fd)
        self.fd = os.dup(self.root_fd)
        self.done, self.pending = [], resolved
        return True

    def descend(self, name: str) -> None:
        fd = os.open(name, _DIR, dir_fd=self.fd)
        os.close(self.fd)
        self.fd = fd
        self.done.append(name)
        self.pending.pop(0)

    def parents(self, *, create: Check | None) -> None:
        """Walk every component but the last. `create`: make missing directories, after the
        canonical path is checked (once, before anything exists that the check would refuse);
        None: a missing directory raises ENOENT."""
        checked = False
        steps = 0
        while len(self.pending) > 1:
            steps += 1
            if steps > _MAX_STEPS:  # a directory made and removed again and again
                raise ToolError(f"{self.path}: changed while it was walked")
            name = self.pending[0]
            _no_git(self.path, [*self.done, name])
            try:
                self.descend(name)
                continue
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    if checked:  # a link appeared where this call just made a directory
                        raise ToolError(f"{self.path}: changed while it was written") from None
                    if self.follow(name):
                        continue
                if exc.errno != errno.ENOENT or create is None:
                    raise
            if not checked:
                create(_rel(self.canonical()))
                checked = True
            with suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=self.fd)


def locate(root: Path, path: str) -> str:
    """The canonical relative path `path` names (symlinks resolved, missing parts kept as
    written); nothing is created. Raises `PathEscape` for a way out or into ``.git``."""
    walk = _Walk(root, path)
    try:
        while True:
            try:
                walk.parents(create=None)
            except FileNotFoundError:
                break  # the rest does not exist yet: it cannot be a link
            if not walk.pending:
                break
            name = walk.pending[0]
            try:
                os.stat(name, dir_fd=walk.fd, follow_symlinks=False)
            except FileNotFoundError:
                break
            if not walk.follow(name):
                break
        canonical = walk.canonical()
        _no_git(path, canonical)
        return _rel(canonical)
    finally:
        walk.close()


@contextmanager
def open_file(root: Path, path: str, mode: Mode, check: Check | None = None) -> Iterator[Opened]:
    """A regular file beneath `root`, opened for `mode` (``write`` creates it and its missing
    directories, and truncates only after every check passed). Refuses directories, other
    non-regular files and files with more than one hard link."""
    walk = _Walk(root, path)
    fd = -1
    try:
        created = False
        while True:
            if not walk.pending:  # the root itself, or a link to it
                raise ToolError(f"{path or '.'} is a directory")
            try:
                walk.parents(create=(check or _nothing) if mode == "write" else None)
                name = walk.pending[0]
                _no_git(path, walk.canonical())
                fd = os.open(name, _FILE | _MODES[mode], dir_fd=walk.fd)
                break
            except OSError as exc:
                if exc.errno == errno.ELOOP and walk.follow(walk.pending[0]):
                    continue
                if exc.errno != errno.ENOENT or mode != "write":
                    if check is not None:  # a path outside the token's glob: not even
                        check(_rel(walk.canonical()))  # whether it exists is told
                    raise
            if check is not None:
                check(_rel(walk.canonical()))
            # O_EXCL: a name that appeared since is not written through.
            fd = os.open(name, _FILE | os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=walk.fd)
            created = True
            break
        rel = _rel(walk.canonical())
        _single_regular_file(fd, path)
        if check is not None and not created:
            check(rel)
        yield Opened(fd, rel)
    finally:
        if fd >= 0:
            os.close(fd)
        walk.close()


@contextmanager
def open_dir(root: Path, path: str) -> Iterator[Opened]:
    """A directory beneath `root` (the root itself for an empty path)."""
    walk = _Walk(root, path)
    try:
        while walk.pending:
            walk.parents(create=None)
            name = walk.pending[0]
            _no_git(path, walk.canonical())
            try:
                walk.descend(name)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP) and walk.follow(name):
                    continue
                raise
        yield Opened(walk.fd, _rel(walk.done))
    finally:
        walk.close()


def _single_regular_file(fd: int, path: str) -> None:
    """Refuse what is not a regular file with one name (a hard link's other name may be
    outside the workspace, and the kernel cannot say where)."""
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{path} is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{path} is not a regular file")
    if info.st_nlink > 1:
        raise ToolError(
            f"{path} has {info.st_nlink} hard links: refused (another name of the same"
            " file may be outside the workspace)"
        )


def _nothing(_: str) -> None:
    """The check of a call that has none."""
