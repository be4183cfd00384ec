"""A projection runner that commits only while its replica holds the lease (`Leadership.fence`).

Apart from `runtime.leadership` because it needs PostgreSQL (``nexus-events[postgres]``):
the scheduler campaigns with `Leadership` and has no database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from nexus_events.transport.bus import Bus
from nexus_events.transport.follow import Batch, Feed, Reposition
from nexus_events.transport.projection import Projection, ProjectionRunner


class FencedProjectionRunner(ProjectionRunner):
    """A `ProjectionRunner` that commits a batch only while `fence()` is true.

    The check costs no round trip (`Leadership.fence`). A batch it refuses is not applied,
    nor is the consumer recreated: the runner waits for its stop (the leadership steps down
    once the fence failed) instead of reading again, which would recreate the consumer under
    the new leader's runner. The
    lease can still be lost between the check and the commit; the rows stay right even then,
    because the commit locks the stored checkpoint and applies only events past it, so an
    event is applied once, by whichever replica commits it first.
    """

    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        projection: Projection | Sequence[Projection],
        *,
        fence: Callable[[], Awaitable[bool]],
        batch: int = 500,
        fetch_timeout: float = 1.0,
    ) -> None:
        super().__init__(bus, pool, projection, batch=batch, fetch_timeout=fetch_timeout)
        self.fence = fence
        self.fenced = 0
        self._halted = asyncio.Event()

    async def checkpoint(self, feed: Feed) -> int:
        # Called before the consumer is (re)created from the checkpoint: a deposed runner
        # must not recreate it under the new leader's.
        await self._check_fence()
        return await super().checkpoint(feed)

    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        await self._check_fence()
        await super().handle(feed, batch, delivered)

    async def _check_fence(self) -> None:
        if not await self.fence():
            self.fenced += 1
            await self._halted.wait()  # until `stop`, which the step-down calls
            raise Reposition

    async def stop(self) -> None:
        self._halted.set()
        await super().stop()


__all__ = ["FencedProjectionRunner"]
