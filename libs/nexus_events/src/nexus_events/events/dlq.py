"""Dead letters (``nexus.dlq.v1.<service>``): a poison message and the reason it was given up.

A dead letter always fits in one NATS message: a body larger than the cap is kept as its first
bytes plus its size and SHA-256 (`body_truncated`), and the original stays addressable by
`stream` + `stream_seq` for as long as its stream keeps it (`nexus dlq replay` reads it there).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Event, register


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
    body: str = Field(
        ..., description="Original body (UTF-8 text or base64); its first bytes if truncated."
    )
    body_encoding: Literal["utf-8", "base64"] = Field("utf-8", description="How body is coded.")
    body_size: int | None = Field(
        None, ge=0, description="Size of the original body in bytes (absent: older letters)."
    )
    body_sha256: str | None = Field(
        None, description="Hex SHA-256 of the original body: tells a truncated copy's original."
    )
    body_truncated: bool = Field(
        False,
        description="True when `body` holds only the first bytes of the original (over the cap)"
        " or nothing at all (a reference-only letter).",
    )
    headers_truncated: bool = Field(
        False, description="True when some original headers were cut or left out (over the cap)."
    )
    reason: str = Field(..., description="Reason code: undecodable, invalid_event, ...")
    error: str = Field(..., description="The error, one line.")
    num_delivered: int = Field(..., ge=0, description="Deliveries before giving up.")
