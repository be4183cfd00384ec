"""Thin handlers: consumed run events in, admission state and decisions out."""

from __future__ import annotations

from nexus_events.bus import BatchHandler, Delivery

from nexus_scheduler.schedules_service import ScheduleService
from nexus_scheduler.service import SchedulerService


def create_run_handler(service: SchedulerService) -> BatchHandler:
    """Fold a batch of run events into the state, then admit/queue/cancel as needed."""

    async def handle(deliveries: list[Delivery]) -> None:
        await service.observe_many(d.decoded for d in deliveries)
        await service.act()

    return handle


def create_schedule_handler(schedules: ScheduleService) -> BatchHandler:
    """Fold schedule definitions, removals and fires; firing happens on the tick."""

    async def handle(deliveries: list[Delivery]) -> None:
        for d in deliveries:
            schedules.observe(d.decoded)

    return handle
