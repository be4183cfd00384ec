"""Inbound outbox: a verified request is stored in PostgreSQL (its dedupe key the primary key)
before the 2xx, then published to JetStream with Nats-Msg-Id = that key.

The publish runs after the answer (platforms want a reply within seconds); a crash or a NATS
outage in between leaves the row unpublished, and the sweep publishes it again later; the
Nats-Msg-Id makes a repeat harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from nexus_events.contract.codec import Encoded
from nexus_events.errors import BusError
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.bus import Bus

from nexus_channel_gateway.inbound import Accepted
from nexus_channel_gateway.store import GatewayStore

log = logging.getLogger(__name__)

# Published at most this many at once (nats-py pipelines acks; docs/performance.md has the
# pipelined figures).
WINDOW = 200


class InboundOutbox:
    def __init__(self, bus: Bus, store: GatewayStore, sweep_interval: float = 5.0) -> None:
        self.bus = bus
        self.store = store
        self.sweep_interval = sweep_interval
        self._queue: asyncio.Queue[tuple[str, Encoded]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        # A sweep in hand is cut on stop: the rows it did not mark stay for the next one.
        self._sweeps = PeriodicTask(
            self.sweep,
            sweep_interval,
            name="inbound sweep",
            first="after_interval",
            stop_grace=0,
            logger=log,
        )
        self.published = 0
        # Called with the keys JetStream acknowledged (bench: request -> ack latency).
        self.on_published: Callable[[list[str]], None] | None = None

    async def accept(self, verdict: Accepted) -> bool:
        """Store the message; False if it is a duplicate (a platform retry)."""
        enc = self.bus.encode(verdict.subject, verdict.event, msg_id=verdict.key)
        fresh = await self.store.accept(enc, verdict.key, verdict.aliases)
        if fresh:
            self._queue.put_nowait((verdict.key, enc))
        return fresh

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._publish_loop(), name="gateway-outbox")]
        self._sweeps.start()

    async def stop(self) -> None:
        """Publish what is queued (bounded), then stop; the rest stays for the next start."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=5)
        await self._sweeps.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _publish(self, batch: list[tuple[str, Encoded]]) -> None:
        results = await asyncio.gather(
            *(self.bus.publish_encoded(enc) for _, enc in batch), return_exceptions=True
        )
        done = [
            key
            for (key, _), r in zip(batch, results, strict=True)
            if not isinstance(r, BaseException)
        ]
        for (key, _), r in zip(batch, results, strict=True):
            if isinstance(r, BaseException):
                log.warning("inbound %s not published yet (the sweep retries): %s", key, r)
        if done:
            if self.on_published is not None:
                self.on_published(done)
            await self.store.mark_published(done)
            self.published += len(done)

    async def _publish_loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < WINDOW and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._publish(batch)
            except (BusError, OSError) as exc:  # PostgreSQL away: the sweep retries
                log.warning("marking inbound as published failed: %s", exc)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def sweep(self) -> int:
        """Publish rows left unpublished (a crash, an outage); returns how many."""
        rows = await self.store.unpublished()
        if rows:
            await self._publish(rows)
        return len(rows)
