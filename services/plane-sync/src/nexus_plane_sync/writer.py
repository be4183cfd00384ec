"""The outbox writer: plane_sync's pending writes made on Plane, in order, at Plane's pace.

For each pending write (oldest first): publish the intent (`PlaneWriteRequested`), make it
(`Board.execute`, idempotent by its write id), publish the outcome (`PlaneWriteSucceeded` or,
for a 4xx Plane refuses, `PlaneWriteFailed`) and mark the row. Plane being away stops the pass
where it is (the row stays pending, the ones after it wait) and it is tried again with a
growing pause, so the queue catches up in order once Plane is back. A write whose task is not
known yet waits, holding back only the later writes of the same task, and fails after
`not_ready_grace` seconds. A NOTIFY from the mirror's commit wakes the writer at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from nexus_events.contract import subjects
from nexus_events.errors import BusError
from nexus_events.events import PlaneWriteFailed, PlaneWriteRequested, PlaneWriteSucceeded
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.bus import Bus

from nexus_plane_sync.board import Board
from nexus_plane_sync.errors import NotReady, PlaneRejected, PlaneUnavailable
from nexus_plane_sync.metrics import PlaneSyncMetrics
from nexus_plane_sync.store import OUTBOX_CHANNEL, Pending, PlaneStore

log = logging.getLogger(__name__)

# How often settled rows and old delivery ids are pruned, and how long each is kept.
PRUNE_EVERY = 3600.0
KEEP_DONE_DAYS = 7.0
KEEP_DELIVERIES_DAYS = 30.0
# Pauses after Plane was away: doubling from the first to the last, which then repeats.
AWAY_PAUSES = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class OutboxWriter:
    def __init__(
        self,
        bus: Bus,
        store: PlaneStore,
        board: Board,
        metrics: PlaneSyncMetrics,
        *,
        poll: float = 1.0,
        not_ready_grace: float = 60.0,
        away_pauses: tuple[float, ...] = AWAY_PAUSES,
    ) -> None:
        self.bus = bus
        self.store = store
        self.board = board
        self.metrics = metrics
        self.poll = poll
        self.not_ready_grace = not_ready_grace
        self.away_pauses = away_pauses
        self._wake = asyncio.Event()
        # Set by `stop`: a pass in hand ends after the write in hand.
        self._stopping = asyncio.Event()
        self._passes = PeriodicTask(
            self._pass,
            poll,
            name="outbox pass",
            wake=self._wake,
            on_error=self._failed,
            logger=log,
        )
        self._listener: PoolConnectionProxy[Any] | None = None
        self.away = 0  # passes in a row that met Plane away
        self._pruned = 0.0  # monotonic time of the last prune

    async def start(self) -> None:
        conn = await self.store.pool.acquire()
        await conn.add_listener(OUTBOX_CHANNEL, self._notified)
        self._listener = conn
        self._stopping.clear()
        self._passes.start()

    def _notified(self, *_: object) -> None:
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        """Finish the write in hand, then stop."""
        self._stopping.set()
        await self._passes.stop()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.remove_listener(OUTBOX_CHANNEL, self._notified)
            await self.store.pool.release(self._listener)
            self._listener = None

    async def _pass(self) -> None:
        await self.drain_once()
        self.away = 0
        if time.monotonic() - self._pruned > PRUNE_EVERY:
            self._pruned = time.monotonic()
            await self.store.prune(done_days=KEEP_DONE_DAYS, delivery_days=KEEP_DELIVERIES_DAYS)

    def _failed(self, exc: Exception) -> float:
        """Say why the pass failed; the pause before the next one (only `stop` cuts it)."""
        if isinstance(exc, PlaneUnavailable):
            pause = self.away_pauses[min(self.away, len(self.away_pauses) - 1)]
            self.away += 1
            self.metrics.writes["plane_away"] += 1
            log.warning("Plane is away (%s); the outbox waits %.1f s", exc, pause)
            return pause
        if isinstance(exc, (BusError, OSError, asyncpg.PostgresError)):
            log.warning("outbox pass failed (%s); trying again", exc)
            return 1.0
        log.exception("outbox pass failed unexpectedly")  # called while handling `exc`
        return 2.0

    async def drain_once(self) -> int:
        """One pass over the pending writes; returns how many were settled. Raises
        `PlaneUnavailable` (the rest waits) when Plane is away."""
        settled = 0
        while not self._stopping.is_set():
            rows = await self.store.pending()
            if not rows:
                return settled
            held: set[str] = set()
            moved = 0
            for row in rows:
                if self._stopping.is_set():
                    return settled
                if row.task_id in held:
                    continue
                try:
                    moved += await self.write(row)
                except NotReady as exc:
                    held.add(row.task_id)
                    age = (datetime.now(UTC) - row.created_at).total_seconds()
                    if age > self.not_ready_grace:
                        await self._fail(row, None, str(exc))
                        moved += 1
            settled += moved
            if moved == 0:
                return settled
        return settled

    async def write(self, row: Pending) -> int:
        """Make one write; returns 1 if the row was settled (0: merged meanwhile, goes again)."""
        op = self.board.op_of(row)
        if op is None:  # nothing to write in this mode (e.g. progress on native runs)
            return int(await self.store.settle(row, "done"))
        await self.board.check_ready(row)  # before the intent: a write that waits is not tried
        key = subjects.plane_event(row.task_id, "write_requested")
        tag = f"{row.write_id}:v{row.version}"
        await self.store.attempted(row.seq)
        await self.bus.publish(
            key,
            PlaneWriteRequested(
                write_id=row.write_id, op=op, task_id=row.task_id, run_id=row.run_id,
                coalesced=row.coalesced,
            ),
            msg_id=f"{tag}:intent",
        )  # fmt: skip
        try:
            outcome = await self.board.execute(row)
        except PlaneRejected as exc:
            await self._fail(row, exc.status, str(exc), op=op)
            return 1
        await self.bus.publish(
            subjects.plane_event(row.task_id, "write_succeeded"),
            PlaneWriteSucceeded(
                write_id=row.write_id, op=op, plane_id=outcome.plane_id, existed=outcome.existed,
                attempts=row.attempts + 1,
            ),
            msg_id=f"{tag}:outcome",
        )  # fmt: skip
        done = await self.store.settle(row, "done", plane_id=outcome.plane_id)
        self.metrics.writes["existed" if outcome.existed else "done"] += 1
        self.metrics.lags.append((datetime.now(UTC) - row.first_time).total_seconds())
        return int(done)

    async def _fail(self, row: Pending, status: int | None, error: str, *, op: Any = None) -> None:
        op = op or self.board.op_of(row) or "comment"
        await self.bus.publish(
            subjects.plane_event(row.task_id, "write_failed"),
            PlaneWriteFailed(write_id=row.write_id, op=op, status=status, error=error[:1000]),
            msg_id=f"{row.write_id}:v{row.version}:failed",
        )
        await self.store.settle(row, "failed", error=error[:1000])
        self.metrics.writes["failed"] += 1
        log.warning("Plane write %s failed for good: %s", row.write_id, error)
