"""Schedule events (``nexus.schedule.v1.<id>.<event>``): cron, interval and one-shot runs."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Command, Event, register


@register
class ScheduleDefined(Command):
    event_family: ClassVar[Family] = Family.SCHEDULE
    event_name: ClassVar[str] = "defined"

    agent_id: str | None = Field(None, description="Agent to run (or a flow: `flow`).")
    flow: str | None = Field(None, description="Flow to start at each fire (or an agent).")
    task_id: str | None = Field(None, description="Task each run works on.")
    input: str = Field("", description="Input of each run.")
    cron: str | None = Field(None, description="Cron expression (5 fields).")
    interval_seconds: int | None = Field(None, gt=0, description="Fixed interval.")
    at: datetime | None = Field(None, description="One-shot time.")
    timezone: str = Field("UTC", description="Time zone of the cron expression.")
    enabled: bool = Field(True, description="Paused when false.")
    missed_policy: Literal["skip", "catch_up_one"] | None = Field(
        None,
        description="Fires missed while no scheduler ran: 'skip' records each as `missed`,"
        " 'catch_up_one' fires the latest of them once; None = the scheduler's default.",
    )
    overlap_policy: Literal["skip", "queue", "cancel_previous"] | None = Field(
        None,
        description="When a fire comes while the schedule's previous run is still active:"
        " 'skip' records the fire as `missed`, 'queue' requests the run anyway (admission"
        " queues it under the limits), 'cancel_previous' requests cancellation of the previous"
        " run and fires; None = the scheduler's default.",
    )

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleDefined:
        given = [x for x in (self.cron, self.interval_seconds, self.at) if x is not None]
        if len(given) != 1:
            raise ValueError("exactly one of cron, interval_seconds, at is required")
        if (self.agent_id is None) == (self.flow is None):
            raise ValueError("exactly one of agent_id, flow is required")
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

    run_id: str = Field(..., description="Run (or flow run) requested by this fire.")
    scheduled_for: datetime = Field(..., description="The fire time it stands for.")


@register
class ScheduleMissed(Event):
    event_family: ClassVar[Family] = Family.SCHEDULE
    event_name: ClassVar[str] = "missed"

    scheduled_for: datetime = Field(..., description="The fire time that did not fire.")
    reason: str = Field(
        ..., description="Why: e.g. 'missed' (after downtime) or 'overlap' (previous run active)."
    )
