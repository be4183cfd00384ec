"""Messages to a running run (``agent.inbox.v1.<run_id>``) and delegations to an agent
(``agent.route.v1.<agent_id>``).

These subjects carry no event token, so the body's ``type`` field names the message; a body
without one is a plain text message (inbox) or a delegation (route).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Command, register


class _InboxCommand(Command):
    event_family: ClassVar[Family] = Family.INBOX


@register
class InboxMessage(_InboxCommand):
    event_name: ClassVar[str] = "message"

    type: Literal["message"] = Field("message", description="Message kind.")
    text: str = Field(..., min_length=1, description="What the sender says to the agent.")
    sender: str | None = Field(None, description="Who sends it (person or run id).")
    sender_kind: Literal["human", "agent"] = Field("human", description="Person or peer agent.")
    message_id: str | None = Field(None, description="Sender's id for dedupe/threads.")
    channel: str | None = Field(None, description="Chat channel it came from (slack, ...).")
    correlation_id: str | None = Field(
        None, description="Ties a delegated run's result to the delegation that asked for it."
    )


@register
class ApprovalDecision(_InboxCommand):
    event_name: ClassVar[str] = "approval_decision"

    type: Literal["approval_decision"] = Field("approval_decision", description="Message kind.")
    approval_id: str = Field(..., description="The approval answered.")
    decision: Literal["approve", "deny"] = Field(..., description="The answer.")
    decided_by: str | None = Field(None, description="Who answers.")
    comment: str | None = Field(None, description="Optional note for the agent.")
    surface: str | None = Field(
        None, description="Where it was decided: cli, slack, telegram, plane, nats."
    )


@register
class RouteRequest(Command):
    event_family: ClassVar[Family] = Family.ROUTE
    event_name: ClassVar[str] = "delegation"

    type: Literal["delegation"] = Field("delegation", description="Message kind.")
    correlation_id: str = Field(..., description="Ties the delegated run to the requester.")
    input: str = Field(..., description="What the agent should do.")
    task_id: str | None = Field(None, description="Task the work belongs to.")
    from_run_id: str | None = Field(None, description="The delegating run.")
    reply_to: str | None = Field(None, description="Run id whose inbox gets the result.")
    from_agent_id: str | None = Field(
        None, description="Agent of the delegating run (the start of the cycle guard's chain)."
    )
