"""Projections: tables in PostgreSQL that follow JetStream streams, exactly once in effect.

A `Projection` owns one PostgreSQL schema. `ProjectionRunner` reads each of its streams in
order through an ack-less durable consumer, applies every batch in one transaction together
with the checkpoint (stream, consumer, last sequence) stored in that schema, and on start
resumes after the checkpoint. Because rows and checkpoint commit together, a crash at any
point neither loses nor double-applies an event.

`rebuild` replays a projection from the beginning into a fresh schema and swaps it in
atomically (``ALTER SCHEMA ... RENAME``) while the live runner keeps going: the swap holds the
live checkpoint rows locked, catches the new schema up to the end of the stream, then swaps;
the live runner sees the newer checkpoint and skips what the rebuild already applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import asyncpg
import nats.errors
import nats.js.errors
from asyncpg.pool import PoolConnectionProxy
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from nexus_events import subjects
from nexus_events.bus import Bus, decode_msg
from nexus_events.codec import Decoded
from nexus_events.errors import DecodeError
from nexus_events.pull import PullReader, PullStalled
from nexus_events.subjects import validate_token

log = logging.getLogger(__name__)

CHECKPOINT_TABLE = "projection_checkpoint"

# A connection as given by asyncpg: direct, or a pool's proxy (a string: the runtime
# classes are not subscriptable, only their stubs are).
Conn: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"
# Errors that mean "the database is away", not "this event is poison": wait and retry.
_DB_UNAVAILABLE = (
    OSError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncio.TimeoutError,
)


@dataclass(frozen=True)
class Source:
    """A stream a projection follows, optionally narrowed to some subjects."""

    stream: str
    filter_subjects: tuple[str, ...] = ()


class Projection(Protocol):
    """What a projection provides. `create` and `apply` get the schema to write into, which is
    the live schema or a rebuild schema: never hard-code it."""

    name: str
    schema: str
    sources: tuple[Source, ...]

    async def create(self, conn: Conn, schema: str) -> None:
        """Create the projection's tables in `schema` (idempotent: IF NOT EXISTS)."""

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        """Apply decoded events, in stream order, inside the caller's transaction."""


def quote_ident(name: str) -> str:
    validate_token(name, "schema name")
    return '"' + name.replace('"', '""') + '"'


async def _setup_schema(conn: Conn, projection: Projection, schema: str) -> None:
    q = quote_ident(schema)
    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
    await conn.execute(
        f"""CREATE TABLE IF NOT EXISTS {q}.{CHECKPOINT_TABLE} (
                stream text PRIMARY KEY,
                consumer text NOT NULL,
                last_seq bigint NOT NULL DEFAULT 0,
                updated_at timestamptz NOT NULL DEFAULT now())"""
    )
    await projection.create(conn, schema)


async def read_checkpoint(conn: Conn, schema: str, stream: str) -> int:
    value = await conn.fetchval(
        f"SELECT last_seq FROM {quote_ident(schema)}.{CHECKPOINT_TABLE} WHERE stream = $1", stream
    )
    return int(value or 0)


async def _lock_checkpoint(conn: Conn, schema: str, stream: str, consumer: str) -> int:
    q = quote_ident(schema)
    await conn.execute(
        f"INSERT INTO {q}.{CHECKPOINT_TABLE} (stream, consumer) VALUES ($1, $2) "
        "ON CONFLICT (stream) DO NOTHING",
        stream,
        consumer,
    )
    value = await conn.fetchval(
        f"SELECT last_seq FROM {q}.{CHECKPOINT_TABLE} WHERE stream = $1 FOR UPDATE", stream
    )
    return int(value)


async def _relax_durability(conn: Conn) -> None:
    """Commit this transaction without waiting for its WAL flush.

    Safe for projections: rows and checkpoint still commit atomically and in order, so a
    crash can only lose the last few transactions whole, and the runner then re-applies their
    events from the stream. It saves the flush wait on every batch (~14 ms per commit on the
    benchmark machine's disk).
    """
    await conn.execute("SET LOCAL synchronous_commit = off")


async def _store_checkpoint(conn: Conn, schema: str, stream: str, consumer: str, seq: int) -> None:
    await conn.execute(
        f"UPDATE {quote_ident(schema)}.{CHECKPOINT_TABLE} "
        "SET last_seq = $2, consumer = $3, updated_at = now() WHERE stream = $1",
        stream,
        seq,
        consumer,
    )


@dataclass
class _Batch:
    """Fetched messages split into decodable events and poison, with the highest seq."""

    events: list[Decoded]
    poison: list[tuple[Msg, DecodeError]]
    last_seq: int
    num_pending: int


async def _split_yielding(msgs: list[Msg], chunk: int = 250) -> _Batch:
    """`_split`, handing the event loop back every `chunk` messages so the commit of the
    previous batch (PostgreSQL round trips) goes on while this one is decoded."""
    if len(msgs) <= chunk:
        return _split(msgs)
    parts = []
    for start in range(0, len(msgs), chunk):
        parts.append(_split(msgs[start : start + chunk]))
        await asyncio.sleep(0)
    return _Batch(
        [e for p in parts for e in p.events],
        [x for p in parts for x in p.poison],
        parts[-1].last_seq,
        parts[-1].num_pending,
    )


def _split(msgs: list[Msg]) -> _Batch:
    events: list[Decoded] = []
    poison: list[tuple[Msg, DecodeError]] = []
    for msg in msgs:
        try:
            events.append(decode_msg(msg))
        except DecodeError as exc:
            poison.append((msg, exc))
    last = msgs[-1].metadata
    return _Batch(events, poison, last.sequence.stream, last.num_pending)


class _Repositioned(Exception):  # noqa: N818 - control flow inside this module only
    """The database checkpoint is behind what was delivered (a rebuild swapped in)."""


@dataclass(frozen=True)
class _Member:
    projection: Projection
    source: Source

    def wants(self, event: Decoded) -> bool:
        filters = self.source.filter_subjects
        return not filters or any(subjects.matches(f, event.envelope.subject) for f in filters)


@dataclass(frozen=True)
class _Feed:
    """One stream read once for every projection that follows it."""

    stream: str
    consumer: str
    members: tuple[_Member, ...]

    @property
    def filter_subjects(self) -> list[str]:
        if any(not m.source.filter_subjects for m in self.members):
            return []  # someone wants the whole stream
        return sorted({f for m in self.members for f in m.source.filter_subjects})


class ProjectionRunner:
    """Keeps projections up to date with their streams until stopped.

    Given several projections, each stream is fetched and decoded once and every batch is
    applied to all of them in one transaction (each with its own schema and checkpoint), so
    projections that follow the same stream share the reading cost and move together.
    """

    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        projection: Projection | Sequence[Projection],
        *,
        batch: int = 500,
        fetch_timeout: float = 1.0,
        retry_delays: tuple[float, ...] = (0.1, 0.5, 2.0, 5.0),
        max_attempts: int = 5,
    ) -> None:
        self.bus = bus
        self.pool = pool
        self.projections: tuple[Projection, ...] = (
            tuple(projection) if isinstance(projection, Sequence) else (projection,)
        )
        if not self.projections:
            raise ValueError("ProjectionRunner needs at least one projection")
        self.name = "_".join(p.name for p in self.projections)
        self.batch = batch
        self.fetch_timeout = fetch_timeout
        self.retry_delays = retry_delays
        self.max_attempts = max_attempts
        self._stopping = asyncio.Event()
        self._progress = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.applied = 0
        self.last_seq: dict[str, int] = {}
        self.pending: dict[str, int] = {}
        self.feeds = self._feeds()

    @property
    def projection(self) -> Projection:
        """The first (or only) projection."""
        return self.projections[0]

    def _feeds(self) -> list[_Feed]:
        streams: dict[str, list[_Member]] = {}
        for p in self.projections:
            for source in p.sources:
                streams.setdefault(source.stream, []).append(_Member(p, source))
        return [
            _Feed(stream, f"proj_{self.name}_{stream}", tuple(members))
            for stream, members in streams.items()
        ]

    def consumer_name(self, source: Source) -> str:
        return f"proj_{self.name}_{source.stream}"

    async def start(self) -> None:
        """Create schemas and tables if missing, then follow every stream from its checkpoint."""
        async with self.pool.acquire() as conn, conn.transaction():
            for p in self.projections:
                await _setup_schema(conn, p, p.schema)
        for feed in self.feeds:
            self._tasks.append(asyncio.create_task(self._follow(feed), name=feed.consumer))

    async def stop(self) -> None:
        """Finish the batch in hand (committed with its checkpoint), then stop."""
        self._stopping.set()
        for task in self._tasks:
            await task
        self._tasks.clear()

    async def __aenter__(self) -> ProjectionRunner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_until(self, stream: str, seq: int, within: float = 10.0) -> None:
        """Wait until the checkpoint of `stream` reaches `seq` (tests, read-your-writes)."""
        async with asyncio.timeout(within):
            while self.last_seq.get(stream, 0) < seq:
                self._progress.clear()
                await self._progress.wait()

    # -- the follow loop ------------------------------------------------------------------

    async def _position(self, feed: _Feed) -> tuple[PullReader, int]:
        """(Re)create the ack-less consumer to deliver from the lowest checkpoint + 1."""
        async with self.pool.acquire() as conn:
            checkpoint = min(
                [
                    await read_checkpoint(conn, m.projection.schema, feed.stream)
                    for m in feed.members
                ]
            )
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.bus.js.delete_consumer(feed.stream, feed.consumer)
        filters = feed.filter_subjects
        await self.bus.js.add_consumer(
            feed.stream,
            ConsumerConfig(
                name=feed.consumer,
                durable_name=feed.consumer,
                ack_policy=AckPolicy.NONE,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=checkpoint + 1,
                filter_subject=filters[0] if len(filters) == 1 else None,
                filter_subjects=filters if len(filters) > 1 else None,
                max_waiting=4,
            ),
        )
        reader = await PullReader(self.bus.nc, feed.stream, feed.consumer).start()
        self.last_seq[feed.stream] = checkpoint
        self._progress.set()
        return reader, checkpoint

    async def _follow(self, feed: _Feed) -> None:
        # Three things overlap: the reader asks for the next batch as soon as it hands one
        # out (the server streams it in), the batch in hand is decoded, and the batch before
        # it is committed. Commits stay one at a time and in order; a commit that fails is
        # seen before the next one starts, and everything after it is read again from the
        # database checkpoint.
        reader: PullReader | None = None
        committing: asyncio.Task[int] | None = None
        while not self._stopping.is_set():
            try:
                if committing is not None and committing.done():
                    delivered, committing = committing.result(), None
                if reader is None:
                    reader, delivered = await self._position(feed)
                    consumer_seq = 0
                msgs = await reader.fetch(self.batch, self.fetch_timeout)
                if not msgs:
                    continue
                # The consumer numbers its deliveries 1, 2, 3...: a jump means a fetch reply
                # was lost (ack-less consumers do not redeliver), so start again from the DB.
                first = msgs[0].metadata.sequence.consumer
                last = msgs[-1].metadata.sequence.consumer
                if first != consumer_seq + 1 or last - first + 1 != len(msgs):
                    log.warning("gap in %s deliveries, repositioning", feed.consumer)
                    raise _Repositioned  # noqa: TRY301 - same recovery as a moved checkpoint
                consumer_seq = last
                batch = await _split_yielding(msgs)
                if committing is not None:
                    delivered, committing = await committing, None
                committing = asyncio.create_task(self._commit_batch(feed, batch, delivered))
            except _Repositioned:
                await self._settle(committing)
                committing = None
                await self._drop(reader)
                reader = None
            except (
                PullStalled,
                nats.errors.ConnectionClosedError,
                nats.errors.ConnectionReconnectingError,
                nats.errors.StaleConnectionError,
                nats.errors.NoRespondersError,
                nats.js.errors.NotFoundError,
                nats.js.errors.ServiceUnavailableError,
                nats.errors.TimeoutError,
                *_DB_UNAVAILABLE,
            ) as exc:
                log.warning("projection %s: %s; retrying", self.name, exc)
                await self._settle(committing)
                committing = None
                await self._drop(reader)
                reader = None
                await self._pause(0.5)
            except Exception:  # the loop must outlive any bug; it logs loudly
                log.exception("projection %s failed; restarting from the checkpoint", self.name)
                await self._settle(committing)
                committing = None
                await self._drop(reader)
                reader = None
                await self._pause(2.0)
        await self._settle(committing)
        await self._drop(reader)

    async def _commit_batch(self, feed: _Feed, batch: _Batch, delivered: int) -> int:
        await self._apply_with_retries(feed, batch, delivered)
        self.last_seq[feed.stream] = batch.last_seq
        self.pending[feed.stream] = batch.num_pending
        self._progress.set()
        return batch.last_seq

    async def _settle(self, committing: asyncio.Task[int] | None) -> None:
        # Let a commit in flight finish (or fail): the next positioning reads the checkpoint
        # it left behind, so its outcome needs no handling here.
        if committing is not None:
            with contextlib.suppress(Exception):
                await committing

    async def _drop(self, reader: PullReader | None) -> None:
        # Messages still in flight to a dropped ack-less reader are lost to this consumer;
        # the next positioning starts from the database checkpoint, so nothing is skipped.
        if reader is not None:
            await reader.close()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _apply_with_retries(self, feed: _Feed, batch: _Batch, delivered: int) -> None:
        for msg, exc in batch.poison:
            await self.bus.dead_letter(
                msg, reason=exc.reason, error=str(exc), consumer=feed.consumer
            )
        attempt = 0
        while True:
            try:
                await self._commit(feed, batch.events, batch.last_seq, delivered)
            except _DB_UNAVAILABLE:
                raise
            except (_Repositioned, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - apply is projection code: isolate poison
                attempt += 1
                if attempt < self.max_attempts:
                    log.warning(
                        "projection %s batch failed (%s), retry %d", self.name, exc, attempt
                    )
                    await asyncio.sleep(self.retry_delays[min(attempt, len(self.retry_delays)) - 1])
                    continue
                await self._apply_one_by_one(feed, batch, delivered)
                return
            else:
                return

    async def _apply_one_by_one(self, feed: _Feed, batch: _Batch, delivered: int) -> None:
        for event in batch.events:
            seq = event.envelope.stream_seq or delivered
            for attempt in range(1, self.max_attempts + 1):
                try:
                    await self._commit(feed, [event], seq, delivered)
                    break
                except _DB_UNAVAILABLE:
                    raise
                except _Repositioned:
                    raise
                except Exception as exc:  # noqa: BLE001 - this one event is poison here
                    if attempt == self.max_attempts:
                        await self._dead_letter_event(feed, event, exc)
                        await self._commit(feed, [], seq, delivered)
            delivered = seq
        await self._commit(feed, [], batch.last_seq, delivered)

    async def _dead_letter_event(self, feed: _Feed, event: Decoded, exc: Exception) -> None:
        env = event.envelope
        await self.bus.dead_letter_raw(
            subject=env.subject,
            data=event.event.model_dump_json(exclude_none=True).encode(),
            headers={},
            reason="projection_failed",
            error=f"{self.name}: {type(exc).__name__}: {exc}",
            consumer=feed.consumer,
            stream=env.stream,
            stream_seq=env.stream_seq,
            num_delivered=self.max_attempts,
        )

    async def _commit(
        self, feed: _Feed, events: list[Decoded], last_seq: int, delivered: int
    ) -> None:
        applied = 0
        async with self.pool.acquire() as conn, conn.transaction():
            await _relax_durability(conn)
            for member in feed.members:
                schema = member.projection.schema
                checkpoint = await _lock_checkpoint(conn, schema, feed.stream, feed.consumer)
                if checkpoint < delivered:
                    raise _Repositioned
                fresh = [
                    e
                    for e in events
                    if (e.envelope.stream_seq or 0) > checkpoint and member.wants(e)
                ]
                if fresh:
                    await member.projection.apply(conn, schema, fresh)
                    applied += len(fresh)
                if last_seq > checkpoint:
                    await _store_checkpoint(conn, schema, feed.stream, feed.consumer, last_seq)
        self.applied += applied


# -- rebuild ------------------------------------------------------------------------------


async def _replay_into(
    bus: Bus,
    conn: Conn,
    projection: Projection,
    schema: str,
    source: Source,
    *,
    batch: int,
    consumer: str,
) -> int:
    """Apply `source` from the checkpoint in `schema` to the end; return events applied."""
    start = await read_checkpoint(conn, schema, source.stream) + 1
    applied = 0
    pending: list[Msg] = []
    async for msg in bus.replay_raw(
        source.stream, start_seq=start, filter_subjects=source.filter_subjects, batch=batch
    ):
        pending.append(msg)
        if len(pending) >= batch:
            applied += await _apply_replayed(
                conn,
                projection=projection,
                schema=schema,
                source=source,
                msgs=pending,
                consumer=consumer,
            )
            pending = []
    if pending:
        applied += await _apply_replayed(
            conn,
            projection=projection,
            schema=schema,
            source=source,
            msgs=pending,
            consumer=consumer,
        )
    return applied


async def _apply_replayed(
    conn: Conn,
    *,
    projection: Projection,
    schema: str,
    source: Source,
    msgs: list[Msg],
    consumer: str,
) -> int:
    events = _split(msgs).events  # poison was dead-lettered by the live runner already
    async with conn.transaction():
        await _relax_durability(conn)
        checkpoint = await _lock_checkpoint(conn, schema, source.stream, consumer)
        fresh = [e for e in events if (e.envelope.stream_seq or 0) > checkpoint]
        if fresh:
            await projection.apply(conn, schema, fresh)
        last = msgs[-1].metadata.sequence.stream
        if last > checkpoint:
            await _store_checkpoint(conn, schema, source.stream, consumer, last)
    return len(fresh)


async def rebuild(
    bus: Bus, pool: asyncpg.Pool[Any], projection: Projection, *, batch: int = 1000
) -> int:
    """Replay `projection` from the start into a fresh schema and swap it in atomically.

    Returns the number of events applied. Readers see the old tables until the swap commits,
    then the new ones; a live `ProjectionRunner` carries on from the new checkpoint.
    """
    live = projection.schema
    fresh_schema = f"{live}__rebuild"
    consumer = f"rebuild_{projection.name}"
    applied = 0
    async with pool.acquire() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(fresh_schema)} CASCADE")
        async with conn.transaction():
            await _setup_schema(conn, projection, fresh_schema)
        for source in projection.sources:
            applied += await _replay_into(
                bus, conn, projection, fresh_schema, source, batch=batch, consumer=consumer
            )
        async with conn.transaction():
            await _setup_schema(conn, projection, live)
            # Hold the live checkpoints so the live runner cannot commit past what we replay.
            for source in projection.sources:
                await _lock_checkpoint(conn, live, source.stream, consumer)
            for source in projection.sources:
                applied += await _replay_into(
                    bus, conn, projection, fresh_schema, source, batch=batch, consumer=consumer
                )
            await conn.execute(f"DROP SCHEMA {quote_ident(live)} CASCADE")
            await conn.execute(
                f"ALTER SCHEMA {quote_ident(fresh_schema)} RENAME TO {quote_ident(live)}"
            )
    log.info("projection %s rebuilt from %d events", projection.name, applied)
    return applied


async def projection_status(
    bus: Bus, pool: asyncpg.Pool[Any], projection: Projection
) -> dict[str, dict[str, int]]:
    """Per source stream: checkpoint, stream last sequence and the gap between them."""
    out: dict[str, dict[str, int]] = {}
    async with pool.acquire() as conn:
        for source in projection.sources:
            try:
                checkpoint = await read_checkpoint(conn, projection.schema, source.stream)
            except asyncpg.exceptions.UndefinedTableError:
                checkpoint = 0
            info = await bus.js.stream_info(source.stream)
            last = info.state.last_seq
            out[source.stream] = {
                "checkpoint": checkpoint,
                "stream_last_seq": last,
                "behind": max(last - checkpoint, 0),
            }
    return out


__all__ = [
    "CHECKPOINT_TABLE",
    "Conn",
    "Projection",
    "ProjectionRunner",
    "Source",
    "projection_status",
    "quote_ident",
    "read_checkpoint",
    "rebuild",
]
