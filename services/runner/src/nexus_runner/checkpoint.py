"""Workspace checkpoints: after a tool call that changed the workspace, its tree as a commit on
``refs/nexus/checkpoints/<run_id>``, bundled into the checkpoints stream (the object store
streams.CHECKPOINTS_BUCKET's) and announced by a ``checkpointed`` event; attempt n+1 restores
the last one so the workspace matches the transcript it goes on from (docs/resume.md).

A bundle is written as chunks on ``$O.nexus_checkpoints.C.<run_id>.<attempt>.<n>``
(`run_access.checkpoint_chunks`), without the object store's meta record, and read back by a
named consumer filtered on that subject: a run's NATS credential may write and read its own
run's checkpoints and no other's (object names, meta subjects and purges are not per run).
The ``checkpointed`` event carries the size and digest a restore checks. Old checkpoints are
not deleted by the run (that would need a purge, which no run may do): the stream's max age
(the transcripts' retention) ends them.

A checkpoint holds what ``git add -A`` would: files the workspace's .gitignore excludes (a
``.env``, build output, caches) are not in it, so secrets kept there are never copied to the
object store, and a resumed attempt does not have them either. Tracked files that hold a
secret value are in it (the bucket is the runner's alone, like the transcript).

Checkpoints are best effort during a run: one that fails is a warning line and the run goes
on (no worse than without); but a ``checkpointed`` event is only published for a bundle that
is stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.object_store import ObjectStore
from nexus_events.contract import run_access
from nexus_events.contract.streams import CHECKPOINTS_BUCKET, StreamSettings
from nexus_events.errors import BusError
from nexus_events.events.runs import RunCheckpointed

from nexus_runner.errors import ToolError
from nexus_runner.git import EMPTY_TREE, Git
from nexus_runner.publisher import RunPublisher
from nexus_runner.transcript import ResumeFailedError

log = logging.getLogger(__name__)

DAY = 86_400.0
# Bytes of one chunk message (the object store's default chunk size; under max_payload).
CHUNK_SIZE = 128 * 1024
# Headers of a chunk: its index and the bundle's chunk count. A restore keeps the last full
# series on the subject (a re-run of the same attempt may have written one before).
CHUNK_HEADER = "Nexus-Chunk"
CHUNKS_HEADER = "Nexus-Chunks"


def _chunks_subject(name: str) -> str:
    """The chunk subject of the checkpoint named ``<run_id>/<attempt>-<n>``."""
    run_id, _, rest = name.partition("/")
    attempt, _, count = rest.partition("-")
    if not (attempt.isdigit() and count.isdigit()):
        raise ResumeFailedError(f"not a checkpoint name: {name!r}")
    return run_access.checkpoint_chunks(run_id, int(attempt), int(count))


def _reassemble(parts: list[tuple[int, int, bytes]]) -> bytes | None:
    """The last complete series of (index, count, data) chunks, or None."""
    series: list[bytes] = []
    done: bytes | None = None
    for index, count, data in parts:
        if index == 0:
            series = []
        if index != len(series):
            series = []  # a torn series: wait for the next start
            continue
        series.append(data)
        if len(series) == count:
            done = b"".join(series)
    return done


def checkpoint_ref(run_id: str) -> str:
    return f"refs/nexus/checkpoints/{run_id}"


async def checkpoint_bucket(js: JetStreamContext, settings: StreamSettings) -> ObjectStore:
    """The checkpoints bucket, created when missing (its TTL: how long a run can be resumed)."""
    try:
        return await js.object_store(CHECKPOINTS_BUCKET)
    except nats.js.errors.BucketNotFoundError:
        config = ObjectStoreConfig(
            description="Workspace checkpoints of runs (git bundles), for resume.",
            ttl=settings.transcripts_max_age_days * DAY or None,
            storage=StorageType.FILE,
            replicas=settings.replicas,
        )
        return await js.create_object_store(CHECKPOINTS_BUCKET, config=config)


class Checkpointer:
    """Checkpoints one attempt's workspace (`git` acts on it) and restores the last one."""

    def __init__(
        self,
        git: Git,
        js: JetStreamContext,
        pub: RunPublisher,
        *,
        base_sha: str | None,
        stream_settings: StreamSettings | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.git = git
        self.js = js
        self.pub = pub
        self.base_sha = base_sha
        self.stream_settings = stream_settings or StreamSettings()
        self.ref = checkpoint_ref(pub.run_id)
        self.count = 0
        self.last_tree: str | None = None
        # HEAD when the workspace was last noted (start, checkpoint): a restore puts HEAD back
        # there, so an agent's commit that changed no file still needs a checkpoint to last.
        self.last_head: str | None = None
        self.previous_object: str | None = None
        self.restored: RunCheckpointed | None = None
        # A private index: `git add -A` into it finds the workspace's tree without touching
        # the agent's own index; kept for the run so its stat cache makes the check cheap.
        self._tmp = Path(tempfile.mkdtemp(prefix="nexus-checkpoint-"))
        self._index = self._tmp / "index"
        # The private index as `git write-tree` last read it, and the tree it wrote.
        self._index_stamp: tuple[int, int, int] | None = None
        self._index_tree: str | None = None
        self._bucket: ObjectStore | None = None
        # Raises to stop a write (a superseded runner stores no more checkpoints).
        self._guard = guard or (lambda: None)

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    async def _tree(self) -> str:
        """The workspace's tree as `git add -A` sees it (the agent's index is left alone)."""
        env = {"GIT_INDEX_FILE": str(self._index)}
        if not self._index.exists():
            real = self.git.root / ".git" / "index"
            if real.is_file():  # its stat cache: only changed files are hashed
                await asyncio.to_thread(shutil.copyfile, real, self._index)
        await self.git.run("add", "-A", env=env)
        # `git add` leaves the index file alone when nothing changed (it writes a new file and
        # renames it over the old one otherwise): the same file, the same tree, and no second
        # git process. A check after a call that wrote nothing (an MCP call) cost two.
        stamp = _file_stamp(self._index)
        if stamp is not None and stamp == self._index_stamp and self._index_tree is not None:
            return self._index_tree
        tree = (await self.git.run("write-tree", env=env)).output.strip()
        self._index_stamp, self._index_tree = stamp, tree
        return tree

    async def start(self) -> None:
        """Note the workspace as it is now (after the clone or a restore): unchanged from it,
        no checkpoint is taken."""
        self.last_tree = await self._tree()
        self.last_head = await self.git.head()

    async def after_call(self, turn: int) -> RunCheckpointed | None:
        """Checkpoint the workspace if it changed since the last one; None if it did not or
        the checkpoint failed (logged, and the run goes on)."""
        try:
            tree = await self._tree()
            if tree == self.last_tree:
                return None
            event = await self._checkpoint(turn, tree)
        except (ToolError, OSError, nats.errors.Error) as exc:
            note = f"workspace checkpoint failed (a resume goes on from an older one): {exc}"
            log.warning("run %s: %s", self.pub.run_id, note)
            await self.pub.log("runner", note, turn)
            return None
        return event

    async def settle(self, turn: int) -> RunCheckpointed | None:
        """Before the attempt ends to sleep: checkpoint unless a restore of the last one
        (or the clean clone) gives this very workspace, files and HEAD alike; None if none was
        needed. Not best effort: a failure raises (the sleep is then refused, since the woken
        attempt could not go on from here)."""
        tree = await self._tree()
        if tree == self.last_tree and await self.git.head() == self.last_head:
            return None
        return await self._checkpoint(turn, tree)

    async def _checkpoint(self, turn: int, tree: str) -> RunCheckpointed:
        self._guard()
        head = await self.git.head()
        parent = ["-p", head] if head else []
        message = f"nexus checkpoint {self.pub.run_id} attempt {self.pub.attempt} turn {turn}"
        commit = (await self.git.run("commit-tree", tree, *parent, "-m", message)).output.strip()
        await self.git.run("update-ref", self.ref, commit)
        bundle = self._tmp / "checkpoint.bundle"
        exclude = [f"^{self.base_sha}"] if self.base_sha else []
        await self.git.run("bundle", "create", "--quiet", str(bundle), self.ref, *exclude)
        data = await asyncio.to_thread(bundle.read_bytes)
        bundle.unlink(missing_ok=True)
        self.count += 1
        name = f"{self.pub.run_id}/{self.pub.attempt}-{self.count}"
        if self._bucket is None:
            self._bucket = await checkpoint_bucket(self.js, self.stream_settings)
        await self._put(name, data)
        base = self.base_sha or EMPTY_TREE
        files = (await self.git.run("diff", "--name-only", base, commit)).output.split()
        event = RunCheckpointed(
            turn=turn,
            commit=commit,
            object=name,
            digest=hashlib.sha256(data).hexdigest(),
            size=len(data),
            files=len(files),
        )
        await self.pub.event(event)
        self.last_tree = tree
        self.last_head = head
        self.previous_object = name
        return event

    async def _put(self, name: str, data: bytes) -> None:
        subject = _chunks_subject(name)
        count = max(1, -(-len(data) // CHUNK_SIZE))
        for index in range(count):
            chunk = data[index * CHUNK_SIZE : (index + 1) * CHUNK_SIZE]
            headers = {CHUNK_HEADER: str(index), CHUNKS_HEADER: str(count)}
            await self.js.publish(subject, chunk, headers=headers)

    async def _get(self, name: str, consumer: run_access.RunConsumer | None = None) -> bytes:
        """The bundle stored as `name`, read through `consumer` (default: the run's own
        checkpoint replay); `ResumeFailedError` when there is none."""
        subject = _chunks_subject(name)
        consumer = consumer or run_access.checkpoint_replay(self.pub.run_id, self.pub.attempt)
        parts: list[tuple[int, int, bytes]] = []
        bus = self.pub.bus
        async for msg in bus.replay_raw(
            run_access.CHECKPOINTS_STREAM, filter_subject=subject, name=consumer.name
        ):
            headers = msg.headers or {}
            try:
                parts.append((int(headers[CHUNK_HEADER]), int(headers[CHUNKS_HEADER]), msg.data))
            except (KeyError, ValueError):
                continue  # not a chunk this module wrote
        data = _reassemble(parts)
        if data is None:
            raise ResumeFailedError(f"checkpoint {name} cannot be read: no complete bundle")
        return data

    async def restore(
        self, checkpoint: RunCheckpointed, *, source_run_id: str | None = None
    ) -> None:
        """Make the workspace the checkpoint's: its tree in the working tree, HEAD (the run's
        branch) at the commit the agent was on, so its own commits survive and what it had
        not committed is uncommitted again (deleted files included). Raises `ResumeFailedError`.

        `source_run_id`: a fork restores its source run's checkpoint (read through the
        fork's source consumer; the bundle holds the source's checkpoint ref)."""
        consumer, ref = None, self.ref
        if source_run_id is not None:
            consumer = run_access.source_checkpoint_replay(
                self.pub.run_id, self.pub.attempt, source_run_id
            )
            ref = checkpoint_ref(source_run_id)
        try:
            data = await self._get(checkpoint.object, consumer)
        except (nats.errors.Error, BusError) as exc:
            raise ResumeFailedError(
                f"checkpoint {checkpoint.object} cannot be read: {type(exc).__name__} {exc}"
            ) from exc
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != checkpoint.size or digest != checkpoint.digest:
            raise ResumeFailedError(
                f"checkpoint {checkpoint.object} is corrupt: {len(data)} bytes sha256 {digest},"
                f" expected {checkpoint.size} bytes sha256 {checkpoint.digest}"
            )
        bundle = self._tmp / "restore.bundle"
        await asyncio.to_thread(bundle.write_bytes, data)
        try:
            await self.git.run("fetch", "--quiet", str(bundle), f"+{ref}:{self.ref}")
            commit = (await self.git.run("rev-parse", self.ref)).output.strip()
            if commit != checkpoint.commit:
                raise ResumeFailedError(
                    f"checkpoint bundle holds {commit}, not {checkpoint.commit}"
                )
            parent = await self.git.run(
                "rev-parse", "--verify", "--quiet", f"{commit}^", check=False
            )
            await self.git.run("read-tree", "-u", "--reset", commit)
            if parent.ok:
                await self.git.run("update-ref", "HEAD", parent.output.strip())
                await self.git.run("reset", "--quiet")
            else:
                await self.git.run("read-tree", "--empty")
        except ToolError as exc:
            raise ResumeFailedError(
                f"checkpoint {checkpoint.object} cannot be restored: {exc}"
            ) from exc
        finally:
            bundle.unlink(missing_ok=True)
        if source_run_id is None:
            self.previous_object = checkpoint.object
            self.restored = checkpoint


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of `path`, None if it is not there: a file replaced by a rename
    has another inode while the old one exists, and another mtime."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size
