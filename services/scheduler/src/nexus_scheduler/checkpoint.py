"""The leader's snapshots: keep the lifecycle fold current and store it every so often.

The `Checkpointer` starts from the fold a takeover computed (`Rebuilt.fold`) and, at each
`step`, folds the lifecycle events stored since (the same reads as a takeover's first pass,
so the snapshot is by construction the fold of a prefix of NEXUS_RUNS, whatever the live
state holds meanwhile: slots being started, runs being ended) and writes it through the
`SnapshotStore` with the lease revision the leader holds at that moment. A replica that no
longer holds the lease writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from nexus_events.contract.streams import RUNS
from nexus_events.runtime.clock import Clock
from nexus_events.transport.bus import Bus

from nexus_scheduler.rebuild import advance
from nexus_scheduler.snapshot import LifecycleFold
from nexus_scheduler.snapshot_store import SnapshotStore, Written

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(
        self,
        bus: Bus,
        store: SnapshotStore,
        fold: LifecycleFold,
        *,
        stream_created: datetime | None,
        written_seq: int,
        min_events: int,
        lease_revision: Callable[[], Awaitable[tuple[int, datetime | None] | None]],
        clock: Clock,
    ) -> None:
        self.bus = bus
        self.store = store
        self.fold = fold
        self.stream_created = stream_created
        # Stream sequence of the newest snapshot stored (0: none).
        self.written_seq = written_seq
        self.min_events = min_events
        # (revision, epoch) of the lease held now, or None when it is not held (fenced).
        self.lease_revision = lease_revision
        self.clock = clock
        # One step at a time: two would fold into the same state and fill the same slot.
        self._lock = asyncio.Lock()

    async def step(self) -> Written | None:
        """Write a snapshot if NEXUS_RUNS grew by `min_events` messages since the last one.
        None: nothing to write (too few new messages, the stream was recreated, or the lease
        is not held)."""
        async with self._lock:
            return await self._step()

    async def _step(self) -> Written | None:
        info = await self.bus.js.stream_info(RUNS)
        last = info.state.last_seq
        if last < self.fold.seq or info.created != self.stream_created:
            log.warning("NEXUS_RUNS was recreated under the leader: no snapshot written")
            return None
        if last - self.written_seq < self.min_events:
            return None
        await advance(self.bus, self.fold, last, self.clock)
        lease = await self.lease_revision()
        if lease is None:
            return None
        revision, epoch = lease
        written = await self.store.write(self.fold.snapshot(self.stream_created), revision, epoch)
        if written.head is not None:
            self.written_seq = written.head.stream_seq
            log.info(
                "scheduler snapshot written",
                extra={
                    "stream_seq": written.head.stream_seq,
                    "bytes": written.head.size,
                    "open_runs": len(self.fold.state.runs),
                },
            )
        return written
