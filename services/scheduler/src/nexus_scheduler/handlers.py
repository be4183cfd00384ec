"""Thin handlers: consumed run events in, admission state and decisions out."""

from __future__ import annotations

from nexus_events.transport.bus import BatchHandler, Delivery

from nexus_scheduler.schedules_service import ScheduleService
from nexus_scheduler.service import SchedulerService

# Seconds before a message given back by a replica that is not the leader is redelivered:
# by then that replica has stepped down (its campaign notices within a third of the TTL).
NOT_LEADER_REDELIVERY = 1.0


def _give_back(deliveries: list[Delivery]) -> None:
    for d in deliveries:
        d.retry(NOT_LEADER_REDELIVERY)


def create_run_handler(service: SchedulerService) -> BatchHandler:
    """Fold a batch of run events into the state, then admit/queue/cancel as needed."""

    async def handle(deliveries: list[Delivery]) -> None:
        await service.observe_many(d.decoded for d in deliveries)
        # A replica that lost the lease must not take these from the leader (they share the
        # durable consumer): put them back for it rather than acknowledge them. (What it
        # folded is dropped with its state when it steps down.)
        if not await service.act():
            _give_back(deliveries)

    return handle


def create_inbox_handler(service: SchedulerService) -> BatchHandler:
    """Fold messages to runs' inboxes (one to a sleeping run wakes it), then act: a wake is
    published before the batch is acknowledged, so a scheduler killed in between leaves
    the message to be redelivered to the next leader."""

    async def handle(deliveries: list[Delivery]) -> None:
        await service.observe_inbox(d.decoded for d in deliveries)
        if not await service.act():
            _give_back(deliveries)

    return handle


def create_schedule_handler(schedules: ScheduleService) -> BatchHandler:
    """Fold schedule definitions, removals and fires; firing happens on the tick."""

    async def handle(deliveries: list[Delivery]) -> None:
        for d in deliveries:
            schedules.observe(d.decoded)

    return handle
