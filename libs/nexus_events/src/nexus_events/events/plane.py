"""plane-sync's record (``nexus.plane.v1.<key>.<event>``, stream NEXUS_PLANE).

Two kinds of fact. A Plane webhook as received (verified, deduped by its delivery id, which is
also its ``Nats-Msg-Id``), keyed by the Plane work item it concerns. And every write to Plane
as an intent (`PlaneWriteRequested`) followed by one outcome (`PlaneWriteSucceeded` or
`PlaneWriteFailed`), keyed by the Nexus task the work item mirrors; the `write_id` is the
idempotency key Plane sees (the comment's or work item's ``external_id``), so a restart or a
redelivery that repeats a write finds the first one instead of posting twice.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Event, register

# What a write does on Plane (plane-sync's `writes` module turns each into HTTP calls).
WriteOp = Literal[
    "work_item_upsert",  # create (POST, 409 = exists) or update (PATCH) a task's work item
    "work_item_delete",
    "comment",  # one progress comment of a run (started, approval, result, failure)
    "agent_run",  # a native agent run (Plane editions that have them)
    "agent_activity",  # one activity of a native agent run
]


class _PlaneEvent(Event):
    event_family: ClassVar[Family] = Family.PLANE


@register
class PlaneWebhookReceived(_PlaneEvent):
    event_name: ClassVar[str] = "webhook_received"

    delivery_id: str = Field(..., description="X-Plane-Delivery: the dedupe key (Nats-Msg-Id).")
    event: str = Field(..., description="X-Plane-Event: issue, issue_comment, agent_run, ...")
    action: str = Field("", description="create, update or delete (payload `action`).")
    webhook_id: str | None = Field(None, description="Plane webhook that sent it.")
    workspace_id: str | None = Field(None, description="Plane workspace id.")
    data: dict[str, Any] = Field(default_factory=dict, description="The payload's `data`.")
    activity: dict[str, Any] = Field(
        default_factory=dict, description="The payload's `activity` (actor, field, values)."
    )
    received_at: float = Field(..., description="Unix time plane-sync received it.")


@register
class PlaneWriteRequested(_PlaneEvent):
    event_name: ClassVar[str] = "write_requested"

    write_id: str = Field(..., description="Idempotency key (Plane external_id of the object).")
    op: WriteOp = Field(..., description="What the write does.")
    task_id: str = Field(..., description="Nexus task whose work item it touches.")
    run_id: str | None = Field(None, description="Run it reports on, if any.")
    coalesced: int = Field(0, ge=0, description="Earlier pending edits folded into this one.")


@register
class PlaneWriteSucceeded(_PlaneEvent):
    event_name: ClassVar[str] = "write_succeeded"

    write_id: str = Field(..., description="The intent this settles.")
    op: WriteOp = Field(..., description="What the write did.")
    plane_id: str | None = Field(None, description="Id of the Plane object written.")
    existed: bool = Field(False, description="Plane already had it (409): nothing posted twice.")
    attempts: int = Field(1, ge=1, description="HTTP attempts it took.")


@register
class PlaneWriteFailed(_PlaneEvent):
    event_name: ClassVar[str] = "write_failed"

    write_id: str = Field(..., description="The intent this settles.")
    op: WriteOp = Field(..., description="What the write tried.")
    status: int | None = Field(None, description="HTTP status Plane answered, if any.")
    error: str = Field(..., description="Why it was given up (a 4xx Plane will not accept).")


# -- request/reply: nexus.plane.v1.status and nexus.plane.v1.resync (nexus-plane-sync) -------


class PlaneStatusRequest(BaseModel):
    """Body of ``nexus.plane.v1.status`` (takes no parameters)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class PlaneStatusReply(BaseModel):
    """How plane-sync is doing: where it writes, what is waiting, what came in."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    plane_url: str = Field(..., description="The Plane server written to.")
    workspace: str = Field(..., description="Plane workspace slug.")
    project_id: str = Field(..., description="Plane project the work items live in.")
    mode: Literal["comments", "agent_runs"] = Field(
        ..., description="How runs show: comments (every edition) or native agent runs."
    )
    plane_reachable: bool = Field(..., description="The last call to Plane got an answer.")
    pending_writes: int = Field(..., ge=0, description="Writes queued, not yet on Plane.")
    failed_writes: int = Field(..., ge=0, description="Writes Plane refused (4xx), given up.")
    done_writes: int = Field(..., ge=0, description="Writes that landed.")
    coalesced_writes: int = Field(..., ge=0, description="Edits folded into later ones.")
    tasks: int = Field(..., ge=0, description="Tasks known (mirrored as work items).")
    webhooks: dict[str, int] = Field(
        default_factory=dict,
        description="Webhook counters: accepted, duplicate, bad_signature, bad_request, echo.",
    )
    last_error: str | None = Field(None, description="The last Plane error, if any.")


class PlaneResyncRequest(BaseModel):
    """Body of ``nexus.plane.v1.resync``: write every task's work item again (idempotent)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_ids: list[str] = Field(
        default_factory=list, max_length=10_000, description="Only these tasks (empty: all)."
    )


class PlaneResyncReply(BaseModel):
    """How many work item writes the resync queued."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    queued: int = Field(..., ge=0, description="Work item upserts queued.")
