"""The leader's runner of the projection ``spend``: commits only under the lease, then
announces the thresholds the batch crossed and counts what it settled."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from nexus_events.contract.streams import RUNS
from nexus_events.errors import PublishFailed
from nexus_events.transport.bus import Bus
from nexus_events.transport.fenced_projection import FencedProjectionRunner
from nexus_events.transport.follow import Batch, Feed

from nexus_spend.metrics import SpendMetrics
from nexus_spend.projection import SpendProjection

log = logging.getLogger(__name__)


class SpendRunner(FencedProjectionRunner):
    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        projection: SpendProjection,
        *,
        metrics: SpendMetrics,
        fence: Callable[[], Awaitable[bool]],
        batch: int = 500,
        fetch_timeout: float = 1.0,
    ) -> None:
        super().__init__(
            bus, pool, projection, fence=fence, batch=batch, fetch_timeout=fetch_timeout
        )
        self.spend = projection
        self.metrics = metrics

    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        if feed.stream != RUNS:
            # Only run events stage anything, and the three sources are followed
            # concurrently: taking here would clear, or announce before its commit, what a
            # NEXUS_RUNS batch still in its transaction staged.
            await super().handle(feed, batch, delivered)
            return
        self.spend.take_staged()  # what an earlier, failed attempt staged was rolled back
        await super().handle(feed, batch, delivered)
        staged = self.spend.take_staged()
        self.metrics.count(staged.counted)
        if staged.announcements:
            try:
                await self.bus.publish_many(staged.announcements.values())
            except PublishFailed as exc:
                # Committed already: the scope has no thresholds row yet, so its next call
                # announces it again (same message id).
                log.warning("spend: threshold announcement not published: %s", exc)
        if staged.counted:
            await self.metrics.read_gauges(self.pool, self.spend.schema, self.spend.live_schema)
