"""Task events (``nexus.task.v1.<task_id>.<event>``): the board's rows, from the CLI or Plane."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field, field_validator

from nexus_events.contract.subjects import Family, validate_token
from nexus_events.events.base import Command, register
from nexus_events.events.specs import RepoSpec


class Column(StrEnum):
    BACKLOG = "backlog"
    TODO = "todo"
    IN_PROGRESS = "in_progress"
    AWAITING_APPROVAL = "awaiting_approval"
    REVIEW = "review"
    DONE = "done"
    FAILED = "failed"


class _TaskCommand(Command):
    event_family: ClassVar[Family] = Family.TASK


@register
class TaskCreated(_TaskCommand):
    event_name: ClassVar[str] = "created"

    title: str = Field(..., min_length=1, max_length=255, description="Task title.")
    description: str = Field("", description="Task description (markdown).")
    column: Column = Field(Column.BACKLOG, description="Initial board column.")
    labels: list[str] = Field(default_factory=list, description="Labels.")
    repo: RepoSpec | None = Field(None, description="Repository the task is about.")
    created_by: str | None = Field(None, description="Person or service that created it.")
    external_id: str | None = Field(None, description="Id in an outside tracker (Plane).")
    external_source: str | None = Field(None, description="Which outside tracker.")
    team: str | None = Field(None, description="The team its runs count against (docs/spend.md).")

    @field_validator("team")
    @classmethod
    def _team(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "team")


@register
class TaskUpdated(_TaskCommand):
    event_name: ClassVar[str] = "updated"

    title: str | None = Field(None, min_length=1, max_length=255, description="New title.")
    description: str | None = Field(None, description="New description.")
    labels: list[str] | None = Field(None, description="New label set (replaces).")
    repo: RepoSpec | None = Field(None, description="New repository.")
    updated_by: str | None = Field(None, description="Who changed it.")
    team: str | None = Field(None, description="New team.")

    @field_validator("team")
    @classmethod
    def _team(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "team")


@register
class TaskMoved(_TaskCommand):
    event_name: ClassVar[str] = "moved"

    column: Column = Field(..., description="Target column.")
    moved_by: str | None = Field(None, description="Who moved it.")


@register
class TaskDeleted(_TaskCommand):
    event_name: ClassVar[str] = "deleted"

    deleted_by: str | None = Field(None, description="Who deleted it.")
