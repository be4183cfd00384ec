"""Dead letters (``nexus.dlq.v1.<service>``): a poison message kept whole, with the reason."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from nexus_events.events.base import Event, register
from nexus_events.subjects import Family


@register
class DeadLetter(Event):
    event_family: ClassVar[Family] = Family.DLQ
    event_name: ClassVar[str] = "dead_letter"

    type: Literal["dead_letter"] = Field("dead_letter", description="Message kind.")
    service: str = Field(..., description="Service that gave up on the message.")
    consumer: str | None = Field(None, description="Durable consumer it came through.")
    stream: str | None = Field(None, description="Stream of the original.")
    stream_seq: int | None = Field(None, description="Stream sequence of the original.")
    subject: str = Field(..., description="Original subject.")
    headers: dict[str, str] = Field(default_factory=dict, description="Original headers.")
    body: str = Field(..., description="Original body (UTF-8 text or base64).")
    body_encoding: Literal["utf-8", "base64"] = Field("utf-8", description="How body is coded.")
    reason: str = Field(..., description="Reason code: undecodable, invalid_event, ...")
    error: str = Field(..., description="The error, one line.")
    num_delivered: int = Field(..., ge=0, description="Deliveries before giving up.")
