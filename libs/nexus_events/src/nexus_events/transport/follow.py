"""Following streams from a checkpoint kept outside NATS: the loop every projection shares.

A `StreamFollower` reads each of its feeds (a stream, optionally narrowed to some subjects)
through an ack-less consumer that starts just after the checkpoint its subclass keeps (in
PostgreSQL, MongoDB, ...), decodes each batch once, and hands it to `handle`, which applies
it and moves the checkpoint. Nothing is acknowledged to NATS: the stored checkpoint is the
only position, so after a crash, a lost delivery or a moved checkpoint the consumer is made
again from it, and `handle` never sees an event twice past its checkpoint.

Three things overlap: the reader asks for the next batch as soon as it hands one out (the
server streams it in), the batch in hand is decoded, and the batch before it is handled.
`handle` calls stay one at a time and in order; one that fails is seen before the next
starts, and everything after it is read again from the checkpoint.

A follower never stops on one message: messages that do not decode are dead-lettered
(`dead_letter_poison`, once per process however often a batch is re-read) and gone past even
when the DLQ refuses them. A follower that keeps failing says so: `stuck` turns true after
`STUCK_AFTER` failures in a row with nothing applied in between, and `restarts`,
`consecutive_failures` and `last_error` tell readiness probes and metrics why. The count
starts again from zero when a batch is applied, or when the server answers that nothing is
left to read with no batch in hand: a follower with nothing new to apply (the catalog, most of
the time) is healthy again as soon as NATS is back, not only at its next event.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from nexus_events.contract.codec import Decoded
from nexus_events.errors import BusUnavailable, DecodeError, PublishFailed, PullStalled
from nexus_events.transport.bus import FETCH_AWAY_ERRORS, Bus, decode_msg
from nexus_events.transport.dead_letters import build_dead_letter
from nexus_events.transport.pull import PullReader

log = logging.getLogger(__name__)

# NATS errors after which the follower waits a little and repositions: the bus's "away"
# errors of a fetch, plus a stalled pull and a timed-out consumer request.
# A publish that got no ack (a dead letter while NATS is away) is "away" too.
_NATS_AWAY = (
    PullStalled,
    BusUnavailable,
    PublishFailed,
    *FETCH_AWAY_ERRORS,
    nats.errors.TimeoutError,
)
# Failures in a row (nothing applied in between) after which a follower reports itself stuck:
# one or two are a blip (a reconnect, a deadlock retry), three mean it is not moving.
STUCK_AFTER = 3


@dataclass(frozen=True)
class Feed:
    """One stream read by one ack-less consumer, optionally narrowed to some subjects."""

    stream: str
    consumer: str
    filter_subjects: tuple[str, ...] = ()


@dataclass
class Batch:
    """Fetched messages split into decodable events and poison, with the stream position."""

    events: list[Decoded]
    poison: list[tuple[Msg, DecodeError]]
    last_seq: int
    num_pending: int


class Reposition(Exception):  # noqa: N818 - a request, not an error
    """Raised by `handle`: the stored checkpoint is not where this follower left it (a rebuild
    swapped in, another replica moved it); read again from the stored checkpoint."""


def split(msgs: list[Msg]) -> Batch:
    """Decode `msgs`; those that do not decode are kept apart with their error."""
    events: list[Decoded] = []
    poison: list[tuple[Msg, DecodeError]] = []
    for msg in msgs:
        try:
            events.append(decode_msg(msg))
        except DecodeError as exc:
            poison.append((msg, exc))
    last = msgs[-1].metadata
    return Batch(events, poison, last.sequence.stream, last.num_pending)


async def split_yielding(msgs: list[Msg], chunk: int = 250) -> Batch:
    """`split`, handing the event loop back every `chunk` messages so the `handle` of the
    previous batch (database round trips) goes on while this one is decoded."""
    if len(msgs) <= chunk:
        return split(msgs)
    parts = []
    for start in range(0, len(msgs), chunk):
        parts.append(split(msgs[start : start + chunk]))
        await asyncio.sleep(0)
    return Batch(
        [e for p in parts for e in p.events],
        [x for p in parts for x in p.poison],
        parts[-1].last_seq,
        parts[-1].num_pending,
    )


class StreamFollower(abc.ABC):
    """Keeps following its feeds until stopped. Subclasses keep the checkpoint and apply.

    `unavailable`: errors of the subclass's store that mean "away, not broken" (wait briefly
    and reposition, logged as a warning); anything else is logged with its traceback and the
    follower restarts from the checkpoint after a longer pause.
    """

    def __init__(
        self,
        bus: Bus,
        feeds: Sequence[Feed],
        *,
        name: str,
        batch: int = 500,
        fetch_timeout: float = 1.0,
        unavailable: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.bus = bus
        self.feeds = list(feeds)
        self.name = name
        self.batch = batch
        self.fetch_timeout = fetch_timeout
        self.unavailable = unavailable
        self.last_seq: dict[str, int] = {}
        self.pending: dict[str, int] = {}
        self._stopping = asyncio.Event()
        self._progress = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Health: restarts after unexpected errors, failures since the last applied batch.
        self.restarts = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.last_progress = time.monotonic()
        self.poison_dead_lettered = 0
        self.poison_undeliverable = 0
        # Highest stream sequence per stream whose poison this process already filed: a batch
        # read again after a failed commit does not file it again (the DLQ's dedupe is the
        # second line, across restarts).
        self._poison_done: dict[str, int] = {}

    @property
    def stuck(self) -> bool:
        """True while the follower keeps failing without applying anything."""
        return self.consecutive_failures >= STUCK_AFTER

    # -- what a subclass provides ----------------------------------------------------------

    async def setup(self) -> None:  # noqa: B027 - optional: most stores need nothing
        """Prepare the store (tables, indexes) before following starts."""

    @abc.abstractmethod
    async def checkpoint(self, feed: Feed) -> int:
        """The last stream sequence of `feed` already applied (0 for none)."""

    @abc.abstractmethod
    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        """Apply `batch` and store its `last_seq` as the checkpoint. `delivered` is where the
        previous batch left the checkpoint; raise `Reposition` if the stored one differs in a
        way that means re-reading."""

    async def dead_letter_poison(self, feed: Feed, batch: Batch) -> None:
        """Dead-letter the messages of `batch` that did not decode, once each.

        A letter the DLQ refuses outright is logged with the original's position and gone
        past (the original stays in its stream); only NATS being away (`BusUnavailable`, a
        publish that got no ack) is raised, so the batch is read again once it is back.
        """
        done = self._poison_done.get(feed.stream, 0)
        for msg, exc in batch.poison:
            seq = msg.metadata.sequence.stream
            if seq <= done:
                continue
            stored = await self.bus.dead_letter(
                msg, reason=exc.reason, error=str(exc), consumer=feed.consumer
            )
            if stored:
                self.poison_dead_lettered += 1
            else:
                self.poison_undeliverable += 1
            self._poison_done[feed.stream] = done = seq

    async def dead_letter_event(
        self, feed: Feed, event: Decoded, error: Exception, attempts: int
    ) -> None:
        """Copy an event that `handle` could not apply after `attempts` tries to the DLQ
        (reason ``projection_failed``), so the follower can go past it."""
        env = event.envelope
        await self.bus.file_dead_letter(
            build_dead_letter(
                service=self.bus.source,
                subject=env.subject,
                data=event.event.model_dump_json(exclude_none=True).encode(),
                headers={},
                reason="projection_failed",
                error=f"{self.name}: {type(error).__name__}: {error}",
                consumer=feed.consumer,
                stream=env.stream,
                stream_seq=env.stream_seq,
                num_delivered=attempts,
            )
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Prepare the store, then follow every feed from its checkpoint."""
        await self.setup()
        for feed in self.feeds:
            self._tasks.append(asyncio.create_task(self._follow(feed), name=feed.consumer))

    async def stop(self) -> None:
        """Finish the batch in hand (applied with its checkpoint), then stop."""
        self._stopping.set()
        for task in self._tasks:
            await task
        self._tasks.clear()

    async def wait_until(self, stream: str, seq: int, within: float = 10.0) -> None:
        """Wait until the checkpoint of `stream` reaches `seq` (tests, read-your-writes)."""
        async with asyncio.timeout(within):
            while self.last_seq.get(stream, 0) < seq:
                self._progress.clear()
                await self._progress.wait()

    # -- the follow loop -------------------------------------------------------------------

    async def _position(self, feed: Feed) -> tuple[PullReader, int]:
        """(Re)create the ack-less consumer to deliver from the checkpoint + 1."""
        checkpoint = await self.checkpoint(feed)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.bus.js.delete_consumer(feed.stream, feed.consumer)
        filters = list(feed.filter_subjects)
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
                # Its position is the stored checkpoint, so nothing of it is worth
                # replicating: one replica in memory. On an R3 stream it would otherwise be
                # an R3 raft group, whose re-creation after a node died hung for 15 s+.
                num_replicas=1,
                mem_storage=True,
            ),
        )
        reader = await PullReader(self.bus.nc, feed.stream, feed.consumer).start()
        self.last_seq[feed.stream] = checkpoint
        self._progress.set()
        return reader, checkpoint

    async def _follow(self, feed: Feed) -> None:
        reader: PullReader | None = None
        handling: asyncio.Task[int] | None = None
        while not self._stopping.is_set():
            try:
                if handling is not None and handling.done():
                    delivered, handling = handling.result(), None
                if reader is None:
                    reader, delivered = await self._position(feed)
                    consumer_seq = 0
                msgs = await reader.fetch(self.batch, self.fetch_timeout)
                if not msgs:
                    if handling is None and reader.caught_up:
                        self._caught_up()
                    continue
                # The consumer numbers its deliveries 1, 2, 3...: a jump means a delivery was
                # lost (ack-less consumers do not redeliver), so start again from the store.
                first = msgs[0].metadata.sequence.consumer
                last = msgs[-1].metadata.sequence.consumer
                if first != consumer_seq + 1 or last - first + 1 != len(msgs):
                    log.warning("gap in %s deliveries, repositioning", feed.consumer)
                    raise Reposition  # noqa: TRY301 - same recovery as a moved checkpoint
                consumer_seq = last
                batch = await split_yielding(msgs)
                if handling is not None:
                    delivered, handling = await handling, None
                handling = asyncio.create_task(self._handle(feed, batch, delivered))
            except Reposition:
                await self._settle(handling)
                handling = None
                await self._drop(reader)
                reader = None
            except Exception as exc:  # noqa: BLE001 - the loop outlives anything; _failed says it
                pause = self._failed(exc)
                await self._settle(handling)
                handling = None
                await self._drop(reader)
                reader = None
                await self._pause(pause)
        await self._settle(handling)
        await self._drop(reader)

    def _failed(self, exc: Exception) -> float:
        """Count and report a failure of the loop; the seconds to pause before going on."""
        self.consecutive_failures += 1
        previous, self.last_error = self.last_error, f"{type(exc).__name__}: {exc}"[:500]
        what = f"{type(self).__name__} {self.name}"
        away = isinstance(exc, (*_NATS_AWAY, *self.unavailable))
        if away:
            # NATS away (a reconnect, a leader election): expected, so no traceback, and said
            # once per streak (or when the error changes), not every half second.
            if self.consecutive_failures == 1 or self.last_error != previous:
                log.warning("%s: %s; retrying", what, exc)
        else:
            self.restarts += 1
            log.exception(
                "%s failed; restarting from the checkpoint (restart %d, %d failures in a row)",
                what,
                self.restarts,
                self.consecutive_failures,
            )
        if self.consecutive_failures == STUCK_AFTER or (self.stuck and not away):
            stuck = "%s is stuck: %d failures in a row, nothing applied for %.0f s; last: %s"
            args = (what, self.consecutive_failures, time.monotonic() - self.last_progress)
            if away:
                log.error(stuck, *args, self.last_error)
            else:
                log.exception(stuck, *args, self.last_error)
        return 0.5 if away else 2.0

    async def _handle(self, feed: Feed, batch: Batch, delivered: int) -> int:
        await self.handle(feed, batch, delivered)
        self.last_seq[feed.stream] = batch.last_seq
        self.pending[feed.stream] = batch.num_pending
        self.consecutive_failures = 0
        self.last_progress = time.monotonic()
        self._progress.set()
        return batch.last_seq

    def _caught_up(self) -> None:
        # Up to date and the server says so: whatever failed before is over.
        if self.consecutive_failures:
            log.info(
                "%s %s caught up again after %d failures",
                type(self).__name__,
                self.name,
                self.consecutive_failures,
            )
            self.consecutive_failures = 0

    async def _settle(self, handling: asyncio.Task[int] | None) -> None:
        # Let a batch in hand finish (or fail): the next positioning reads the checkpoint it
        # left behind, so its outcome needs no handling here.
        if handling is not None:
            with contextlib.suppress(Exception):
                await handling

    async def _drop(self, reader: PullReader | None) -> None:
        # Messages still in flight to a dropped ack-less reader are lost to this consumer;
        # the next positioning starts from the stored checkpoint, so nothing is skipped.
        if reader is not None:
            await reader.close()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)


__all__ = [
    "STUCK_AFTER",
    "Batch",
    "Feed",
    "Reposition",
    "StreamFollower",
    "split",
    "split_yielding",
]
