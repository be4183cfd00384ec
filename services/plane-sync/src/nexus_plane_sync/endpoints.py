"""The `nexus-plane-sync` nats.micro service: ``nexus.plane.v1.status`` and ``.resync``."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable

from nats.micro.service import Service
from nexus_events.contract import subjects
from nexus_events.events import (
    PlaneResyncReply,
    PlaneResyncRequest,
    PlaneStatusReply,
    PlaneStatusRequest,
)
from nexus_events.transport import micro
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import QueryError

from nexus_plane_sync.store import PlaneStore
from nexus_plane_sync.writer import OutboxWriter

SERVICE_NAME = "nexus-plane-sync"

endpoint_handler = functools.partial(micro.endpoint_handler, service="plane-sync")


class PlaneEndpoints:
    def __init__(
        self,
        bus: Bus,
        store: PlaneStore,
        writer: OutboxWriter,
        status: Callable[[dict[str, int], dict[str, int]], PlaneStatusReply],
    ) -> None:
        self.bus = bus
        self.store = store
        self.writer = writer
        self._status = status
        self.service: Service | None = None

    async def start(self) -> None:
        endpoints: list[tuple[str, str, micro.Handler]] = [
            ("status", subjects.PLANE_STATUS, endpoint_handler(PlaneStatusRequest, self.status)),
            ("resync", subjects.PLANE_RESYNC, endpoint_handler(PlaneResyncRequest, self.resync)),
        ]
        self.service = await micro.start_service(
            self.bus.nc,
            SERVICE_NAME,
            "Nexus plane-sync: status and resync of the Plane mirror",
            endpoints,
        )

    async def stop(self) -> None:
        await micro.stop_service(self.service)
        self.service = None

    async def status(self, _: PlaneStatusRequest) -> PlaneStatusReply:
        return self._status(await self.store.counts(), await self.store.webhook_counts())

    async def resync(self, request: PlaneResyncRequest) -> PlaneResyncReply:
        for task_id in request.task_ids:
            if subjects.TOKEN_PATTERN.fullmatch(task_id) is None:
                raise QueryError(
                    400,
                    f"invalid request: task_ids: {task_id!r} is not a task id",
                    [{"loc": "task_ids", "msg": "not a task id"}],
                )
        queued = await self.store.requeue_tasks(request.task_ids, uuid.uuid4().hex[:12])
        self.writer.wake()
        return PlaneResyncReply(queued=queued)
