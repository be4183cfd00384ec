"""What a commit or a push would carry, read whole for a secret value of the run: every new
object (blobs in full, binary included; the names in trees; commit messages; tags) and the ref.

The objects are read with ``git cat-file --batch``, which applies no filter, no textconv and
no external diff, and with replace refs ignored (``GIT_NO_REPLACE_OBJECTS``, set for all the
runner's git), so what is read is what the push sends. Blobs are streamed in chunks: no size
cut, and the repository is never held in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nexus_runner.safety import SecretRegistry

if TYPE_CHECKING:
    from nexus_runner.git import Git

# Seconds one scan may take (as one git command of the runner: a big repository's first push).
SCAN_TIMEOUT = 600.0
# Bytes of a blob scanned at once, and how many of the previous chunk are scanned again with
# the next (a value, or an encoded run of one, that straddles two chunks is still whole).
CHUNK_BYTES = 1 << 20
OVERLAP_BYTES = 64 * 1024
# Git's own test for a binary file: a NUL byte in the first 8000 bytes.
BINARY_PROBE_BYTES = 8000
# What cat-file says of each object: its id, type, size and the rest of the line asked (the
# path rev-list printed beside it).
_BATCH_FORMAT = "--batch=%(objectname) %(objecttype) %(objectsize) %(rest)"
COMMIT_MESSAGE = "(a commit message or author)"
TAG = "(a tag)"
REF_NAME = "(the branch name)"


@dataclass(frozen=True)
class Leak:
    """A secret found: the path it is at (None for a commit or tag) and what to call it."""

    path: str | None
    label: str


async def push_leaks(git: Git, base: str | None, head: str, branch: str | None = None) -> list[str]:
    """What of the commits `base`..`head` (and the ref `branch`) holds a secret value of the
    run, described without the value: a path, ``<path> (a binary file)``, ``a file name:
    <path>``, a commit message. A scan that cannot finish is a leak too (fails closed)."""
    secrets = git.secrets
    found: list[str] = []
    if branch and secrets.contains(branch):
        found.append(REF_NAME)
    revs = [head, f"^{base}"] if base else [head]
    leaks = await _scan(git, ["rev-list", "--objects", *revs, "--"], piped=True)
    found.extend(leak.label for leak in leaks)
    return list(dict.fromkeys(found))


async def staged_leaks(git: Git) -> list[Leak]:
    """The staged files (added or changed against HEAD, or all when there is no HEAD) whose
    name or whole content holds a secret value of the run."""
    head = await git.head()
    raw = await git.run(
        "diff", "--cached", "--raw", "-z", "--no-abbrev", "--no-renames",
        "--no-ext-diff", "--no-textconv", "--ignore-submodules=all",
        head or git.empty_tree,
    )  # fmt: skip
    fields = raw.output.split("\0")
    by_blob: dict[str, list[str]] = {}
    # Records are ":<modes> <old> <new> <status>" then the path, each NUL-terminated.
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.split()
        if len(parts) == 5 and parts[4] != "D":
            by_blob.setdefault(parts[3], []).append(path)
    leaks: list[Leak] = []
    for path in (p for paths in by_blob.values() for p in paths):
        if git.secrets.contains(path):
            leaks.append(Leak(path, f"a file name: {git.secrets.redact_values(path)}"))
    named = {leak.path for leak in leaks}
    for leak in await _scan(git, list(by_blob), piped=False, paths=by_blob):
        if leak.path not in named:
            leaks.append(leak)
    return leaks


async def _scan(
    git: Git,
    source: list[str],
    *,
    piped: bool,
    paths: dict[str, list[str]] | None = None,
) -> list[Leak]:
    """Read objects through ``cat-file --batch`` for secrets. `piped`: `source` is a git
    command whose output (``<sha> <path>`` lines) feeds cat-file; else `source` is the
    blob ids to read, and `paths` says where each is."""
    procs: list[asyncio.subprocess.Process] = []
    leaks: list[Leak] = []
    codes: list[int] = []
    feeding: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(SCAN_TIMEOUT):
            if piped:
                read_end, write_end = os.pipe()
                try:
                    procs.append(await _spawn(git, source, stdin=None, stdout=write_end))
                    reader = await _spawn(git, ["cat-file", _BATCH_FORMAT], stdin=read_end)
                finally:
                    os.close(read_end)
                    os.close(write_end)
                procs.append(reader)
            else:
                reader = await _spawn(
                    git, ["cat-file", _BATCH_FORMAT], stdin=asyncio.subprocess.PIPE
                )
                procs.append(reader)
                feed = "".join(f"{sha}\n" for sha in source).encode()
                feeding = asyncio.get_running_loop().create_task(_feed(reader, feed))
            async for obj in _objects(reader):
                where = paths.get(obj.sha, []) if paths is not None else [obj.rest]
                leaks.extend(await _leaks_of(obj, where, git.secrets))
            codes = [await proc.wait() for proc in procs]
            if feeding is not None:
                await feeding
    except TimeoutError:
        return [*leaks, Leak(None, "(the commits could not be read in time)")]
    finally:
        if feeding is not None and not feeding.done():
            feeding.cancel()
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
    if any(codes):
        leaks.append(Leak(None, "(the commits could not be read in full)"))
    return leaks


async def _spawn(
    git: Git, args: list[str], stdin: int | None, stdout: int | None = asyncio.subprocess.PIPE
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *git.argv(*args),
        cwd=git.root,
        env=git.env(),
        stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=stdout,
        stderr=asyncio.subprocess.DEVNULL,
        process_group=0,
    )


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(ConnectionError):
        proc.stdin.write(data)
        await proc.stdin.drain()
        proc.stdin.close()


@dataclass
class _Object:
    sha: str
    kind: str
    size: int
    rest: str
    chunks: AsyncIterator[bytes]


async def _objects(proc: asyncio.subprocess.Process) -> AsyncIterator[_Object]:
    """The objects cat-file prints, each with its content as a stream of chunks (which must
    be read to the end before the next object)."""
    out = proc.stdout
    assert out is not None
    while header := await out.readline():
        sha, kind, *more = header.decode("utf-8", "replace").rstrip("\n").split(" ", 3)
        if kind == "missing" or not more:
            continue
        size, rest = int(more[0]), (more[1] if len(more) > 1 else "")

        async def chunks(left: int = size) -> AsyncIterator[bytes]:
            while left > 0:
                block = await out.readexactly(min(CHUNK_BYTES, left))
                left -= len(block)
                yield block
            await out.readexactly(1)  # the newline after the content

        body = chunks()
        yield _Object(sha, kind, size, rest, body)
        async for _ in body:  # whatever the consumer left unread
            pass


async def _leaks_of(obj: _Object, paths: Iterable[str], secrets: SecretRegistry) -> list[Leak]:
    paths = list(paths)
    shown = [secrets.redact_values(p) for p in paths]
    leaks = [Leak(p, f"a file name: {s}") for p, s in zip(paths, shown, strict=True) if p != s]
    if obj.kind == "blob":
        hit, binary = await _blob_holds_secret(obj.chunks, secrets)
        if hit:
            kind = " (a binary file)" if binary else ""
            leaks.extend(Leak(p, f"{s}{kind}") for p, s in zip(paths, shown, strict=True))
        return leaks
    content = b"".join([block async for block in obj.chunks])
    if obj.kind == "tree":
        for name in _tree_names(content):
            if secrets.contains(name):
                where = f"{shown[0]}/" if shown and shown[0] else ""
                leaks.append(Leak(None, f"a file name: {where}{secrets.redact_values(name)}"))
    elif secrets.contains(content.decode("utf-8", "replace")):
        leaks.append(Leak(None, COMMIT_MESSAGE if obj.kind == "commit" else TAG))
    return leaks


async def _blob_holds_secret(
    chunks: AsyncIterator[bytes], secrets: SecretRegistry
) -> tuple[bool, bool]:
    """(whether the blob holds a secret, whether it is binary), reading it to the end."""
    tail = b""
    binary: bool | None = None
    hit = False
    async for block in chunks:
        if binary is None:
            binary = b"\0" in block[:BINARY_PROBE_BYTES]
        if not hit:
            # Undecodable bytes become U+FFFD one by one; ASCII around them stays as is.
            hit = secrets.contains((tail + block).decode("utf-8", "replace"))
            tail = block[-OVERLAP_BYTES:]
    return hit, bool(binary)


def _tree_names(content: bytes) -> list[str]:
    """The entry names of a raw tree object (``<mode> <name>\\0<20-byte id>`` each)."""
    names = []
    at = 0
    while at < len(content):
        space = content.find(b" ", at)
        nul = content.find(b"\0", space)
        if space < 0 or nul < 0:
            break
        names.append(content[space + 1 : nul].decode("utf-8", "replace"))
        at = nul + 21
    return names
