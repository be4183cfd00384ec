"""Schedule events (``nexus.schedule.v1.<id>.<event>``): cron, interval and one-shot runs."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import Field, model_validator

from nexus_events.events.base import Command, Event, register
from nexus_events.subjects import Family


@register
class ScheduleDefined(Command):
    event_family: ClassVar[Family] = Family.SCHEDULE
    event_name: ClassVar[str] = "defined"

    agent_id: str = Field(..., description="Agent to run.")
    task_id: str | None = Field(None, description="Task each run works on.")
    input: str = Field("", description="Input of each run.")
    cron: str | None = Field(None, description="Cron expression (5 fields).")
    interval_seconds: int | None = Field(None, gt=0, description="Fixed interval.")
    at: datetime | None = Field(None, description="One-shot time.")
    timezone: str = Field("UTC", description="Time zone of the cron expression.")
    enabled: bool = Field(True, description="Paused when false.")

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleDefined:
        given = [x for x in (self.cron, self.interval_seconds, self.at) if x is not None]
        if len(given) != 1:
            raise ValueError("exactly one of cron, interval_seconds, at is required")
        return self


@register
class ScheduleRemoved(Command):
    event_family: ClassVar[Family] = Family.SCHEDULE
    event_name: ClassVar[str] = "removed"

    removed_by: str | None = Field(None, description="Who removed it.")


@register
class ScheduleFired(Event):
    event_family: ClassVar[Family] = Family.SCHEDULE
    event_name: ClassVar[str] = "fired"

    run_id: str = Field(..., description="Run requested by this fire.")
    scheduled_for: datetime = Field(..., description="The fire time it stands for.")
