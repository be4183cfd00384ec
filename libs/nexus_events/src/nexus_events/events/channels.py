"""Chat channel messages (``nexus.channel.v1.<channel>.<in|out>``): Slack, Telegram, webhooks."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from nexus_events.events.base import Event, register
from nexus_events.subjects import Family


class _ChannelEvent(Event):
    event_family: ClassVar[Family] = Family.CHANNEL

    conversation: str = Field(..., description="Chat/thread id within the channel.")
    text: str = Field(..., description="Message text.")
    run_id: str | None = Field(None, description="Run the message concerns.")


@register
class ChannelMessageIn(_ChannelEvent):
    event_name: ClassVar[str] = "in"

    user: str = Field(..., description="Sender's id in the channel.")
    message_id: str = Field(..., description="Channel's message id (dedupe key).")


@register
class ChannelMessageOut(_ChannelEvent):
    event_name: ClassVar[str] = "out"

    in_reply_to: str | None = Field(None, description="Message answered.")
    approval_id: str | None = Field(None, description="Approval this message asks about.")
