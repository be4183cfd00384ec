"""Schedule events (``nexus.schedule.v1.<id>.<event>``): cron, interval and one-shot runs."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Command, Event, register
from nexus_events.events.queries import Query, Reply


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

    created_by_run: str | None = Field(
        None,
        description="The run whose agent created it with the `schedule_create` tool (an agent"
        " schedule, docs/schedules.md); None = an operator's.",
    )
    created_by_agent: str | None = Field(
        None, description="The agent that created it (the agent it runs); None = an operator's."
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


class AgentScheduleOp(StrEnum):
    CREATE = "create"
    LIST = "list"
    DELETE = "delete"


class AgentScheduleRequest(Query):
    """Body of ``nexus.scheduler.v1.agent_schedules.<run_id>``: what the run's agent asks of
    its own schedules with the `schedule_create|list|delete` tools (docs/schedules.md). The
    agent, task and team are the run's, read by the scheduler, never taken from here."""

    op: AgentScheduleOp = Field(..., description="create, list or delete.")
    cron: str | None = Field(None, max_length=200, description="create: a 5-field cron (UTC).")
    interval_seconds: int | None = Field(
        None, ge=1, le=366 * 86_400, description="create: a fixed interval instead of cron."
    )
    input: str = Field("", max_length=20_000, description="create: the input of each run.")
    key: str | None = Field(
        None,
        max_length=200,
        description="create: what makes a retried call the same schedule (the tool call id).",
    )
    schedule_id: str | None = Field(None, max_length=128, description="delete: which one.")


class AgentScheduleView(Reply):
    """One agent schedule as its agent sees it."""

    schedule_id: str = Field(..., description="Its id (what `schedule_delete` takes).")
    cron: str | None = Field(None, description="Its cron, or None for an interval.")
    interval_seconds: int | None = Field(None, description="Its interval, or None for a cron.")
    input: str = Field("", description="The input of each run.")
    enabled: bool = Field(True, description="False while an operator has it paused.")
    created_by_run: str | None = Field(None, description="The run that created it.")


class AgentSchedulesReply(Reply):
    """Reply of ``nexus.scheduler.v1.agent_schedules.<run_id>``: the agent's schedules after
    the request, what it created or deleted, and the cap."""

    schedules: list[AgentScheduleView] = Field(
        default_factory=list, description="The agent's schedules."
    )
    created: str | None = Field(None, description="create: the new (or already made) one's id.")
    deleted: str | None = Field(None, description="delete: the id removed.")
    limit: int = Field(..., description="The most schedules the agent may have.")
