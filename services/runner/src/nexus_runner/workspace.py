"""Path confinement: every file a tool touches is opened beneath the workspace root
(`nexus_runner.beneath`), and every failure on the way is a `ToolError` the model reads."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from nexus_runner import beneath
from nexus_runner.beneath import Check, Opened
from nexus_runner.errors import ToolError

# What a failing step says to the model, by errno; others use the system's own wording.
_SAYS = {
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EISDIR: "is a directory",
    errno.ELOOP: "a symbolic link where a file or directory was expected",
    errno.EACCES: "permission denied",
}


@contextmanager
def tool_errors(path: str) -> Iterator[None]:
    """`OSError` of any kind (races included) becomes a `ToolError` naming the path."""
    try:
        yield
    except OSError as exc:
        said = _SAYS.get(exc.errno or 0) or exc.strerror or type(exc).__name__
        raise ToolError(f"{path or '.'}: {said}") from exc


class Workspace:
    """The run's working tree: tools reach its files only through these methods."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def resolve(self, path: str) -> Path:
        """The canonical path `path` names (symlinks resolved inside the root), for checks
        and for commands that take a path (git, a shell's cwd); nothing is opened.

        Raises `PathEscape` for absolute paths, ``..``, a link leading out, or ``.git``;
        `ToolError` for any other failure on the way.
        """
        with tool_errors(path):
            rel = beneath.locate(self.root, path)
        return self.root if rel == "." else self.root / rel

    def read_bytes(self, path: str, limit: int, check: Check | None = None) -> tuple[str, bytes]:
        """(canonical relative path, content) of a file of at most `limit` bytes."""
        with tool_errors(path), beneath.open_file(self.root, path, "read", check) as opened:
            if os.fstat(opened.fd).st_size > limit:
                raise ToolError(f"{path} is larger than {limit} bytes")
            return opened.rel, _read_all(opened.fd, limit)

    def write_text(self, path: str, content: str, check: Check | None = None) -> str:
        """Write `content` (UTF-8), making missing directories; the canonical path written."""
        data = _encoded(path, content)
        with tool_errors(path), beneath.open_file(self.root, path, "write", check) as opened:
            os.ftruncate(opened.fd, 0)
            _write_all(opened.fd, data)
            return opened.rel

    def edit_text(self, path: str, change: Callable[[str], str], limit: int) -> str:
        """Read a UTF-8 file, write back `change(text)` through the same fd."""
        with tool_errors(path), beneath.open_file(self.root, path, "edit") as opened:
            if os.fstat(opened.fd).st_size > limit:
                raise ToolError(f"{path} is larger than {limit} bytes")
            try:
                text = _read_all(opened.fd, limit).decode()
            except UnicodeDecodeError:
                raise ToolError(f"{path} is not UTF-8 text; it cannot be edited") from None
            data = _encoded(path, change(text))
            os.lseek(opened.fd, 0, os.SEEK_SET)
            os.ftruncate(opened.fd, 0)
            _write_all(opened.fd, data)
            return opened.rel

    @contextmanager
    def directory(self, path: str) -> Iterator[Opened]:
        """A directory's fd, to walk with `os.fwalk(dir_fd=...)` (never leaving it)."""
        with tool_errors(path), beneath.open_dir(self.root, path) as opened:
            yield opened


def _encoded(path: str, content: str) -> bytes:
    try:
        return content.encode()
    except UnicodeEncodeError:
        raise ToolError(f"the content for {path} is not valid Unicode text") from None


def _read_all(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:  # grew since fstat
        raise ToolError(f"file is larger than {limit} bytes")
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
