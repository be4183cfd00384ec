"""Schedules as the CLI reads and writes them: `nexus_events.transport.schedule_records`, with
the CLI's publish errors."""

from __future__ import annotations

from nexus_events.events import Event
from nexus_events.transport import schedule_records
from nexus_events.transport.schedule_records import (
    ScheduleRecord,
    read_schedule,
    read_schedules,
    schedule_filter,
    set_enabled,
    status_of,
)

from nexus_cli.client import Session

__all__ = [
    "ScheduleRecord",
    "define",
    "read_schedule",
    "read_schedules",
    "schedule_filter",
    "set_enabled",
    "status_of",
]


async def define(s: Session, schedule_id: str, event: Event) -> None:
    """Publish `defined` or `removed` for the schedule."""
    await s.publish_guarded(schedule_records.define(s.bus, schedule_id, event, "cli"))
