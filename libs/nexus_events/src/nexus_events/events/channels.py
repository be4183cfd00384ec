"""Chat channel events (``nexus.channel.v1.<channel>.<event>``): Slack, Telegram, webhooks.

The last token is the direction for chat messages (``in``: a person wrote to the bot,
``out``: the gateway intends to send) and an event name for the facts around them: ``sent``
(the outcome of an ``out`` intent, same idempotency key), ``webhook`` (a verified generic
webhook delivery), ``pairing_requested|pairing_approved|pairing_revoked`` (the allowlist,
event-sourced) and ``approval_relayed`` (an approval posted to a chat under a short id).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Command, Event, register


class ChannelAddress(BaseModel):
    """Where in a chat a reply goes: the channel (subject token), the chat, the thread."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    channel: str = Field(..., description="Channel token: slack, telegram, or a webhook source.")
    conversation: str = Field(..., description="Chat id within the channel.")
    thread: str | None = Field(None, description="Thread root (Slack thread_ts, Telegram msg).")


class ConversationMessage(BaseModel):
    """One message of a chat conversation as the next run's transcript begins with it: what
    the person wrote (`user`) or what the agent answered (`assistant`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Literal["user", "assistant"] = Field(..., description="Who said it.")
    text: str = Field(..., max_length=20_000, description="What was said.")


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
    thread: str | None = Field(
        None, description="Thread the message is in (Slack thread_ts; Telegram: the message"
        " it replies to); None at the top level."
    )  # fmt: skip
    direct: bool = Field(False, description="True in a direct message to the bot.")
    dedupe_key: str | None = Field(
        None, description="The gateway's dedupe key (also the Nats-Msg-Id of this event)."
    )
    user_name: str | None = Field(None, description="Sender's display name, if the channel says.")


@register
class ChannelMessageOut(_ChannelEvent):
    """An intent to send: the sender posts it once per `idempotency_key`, then publishes
    `ChannelMessageSent` with the same key."""

    event_name: ClassVar[str] = "out"

    in_reply_to: str | None = Field(None, description="Message answered.")
    approval_id: str | None = Field(None, description="Approval this message asks about.")
    idempotency_key: str | None = Field(
        None, description="One post per key, across restarts and redeliveries."
    )
    thread: str | None = Field(None, description="Thread to post in (None: top level).")
    kind: str | None = Field(
        None, description="What it says: started, approval, result, failed, pairing, notice."
    )


@register
class ChannelMessageSent(Event):
    """The outcome of one `ChannelMessageOut` intent."""

    event_family: ClassVar[Family] = Family.CHANNEL
    event_name: ClassVar[str] = "sent"

    idempotency_key: str = Field(..., description="Key of the intent this answers.")
    conversation: str = Field(..., description="Chat the message went to.")
    status: Literal["sent", "failed", "unknown"] = Field(
        ..., description="sent; failed (the platform refused); unknown (a crash mid-post)."
    )
    platform_message_id: str | None = Field(None, description="Channel's id of the post.")
    error: str | None = Field(None, description="Why it failed.")
    attempts: int = Field(1, ge=1, description="Deliveries of the intent it took.")
    run_id: str | None = Field(None, description="Run the message concerns.")


@register
class WebhookReceived(Event):
    """A verified delivery of a generic webhook source (configured in YAML)."""

    event_family: ClassVar[Family] = Family.CHANNEL
    event_name: ClassVar[str] = "webhook"

    source: str = Field(..., description="Configured source name (also the channel token).")
    kind: str | None = Field(None, description="Event kind, from a header or a JSON path.")
    delivery_id: str = Field(..., description="The sender's delivery id (the dedupe key).")
    payload: Any = Field(None, description="The JSON body as sent.")


@register
class PairingRequested(Event):
    """An unknown sender was given a pairing code; an operator approves it (`nexus pair`)."""

    event_family: ClassVar[Family] = Family.CHANNEL
    event_name: ClassVar[str] = "pairing_requested"

    user: str = Field(..., description="Sender's id in the channel.")
    code: str = Field(..., description="Short pairing code (unambiguous alphabet).")
    expires_at: datetime = Field(..., description="After this the code no longer pairs.")
    conversation: str | None = Field(None, description="Chat the request came from.")
    user_name: str | None = Field(None, description="Sender's display name, if known.")


@register
class PairingApproved(Command):
    """The sender of a pairing code is on the allowlist of its channel from now on."""

    event_family: ClassVar[Family] = Family.CHANNEL
    event_name: ClassVar[str] = "pairing_approved"

    user: str = Field(..., description="Sender's id in the channel.")
    code: str | None = Field(None, description="Code approved (None: added directly).")
    approved_by: str | None = Field(None, description="Operator who approved.")


@register
class PairingRevoked(Command):
    """The sender is off the allowlist of its channel."""

    event_family: ClassVar[Family] = Family.CHANNEL
    event_name: ClassVar[str] = "pairing_revoked"

    user: str = Field(..., description="Sender's id in the channel.")
    revoked_by: str | None = Field(None, description="Operator who revoked.")


@register
class ApprovalRelayed(Event):
    """A run's approval request was posted to a chat under a short id (`yes <id>`)."""

    event_family: ClassVar[Family] = Family.CHANNEL
    event_name: ClassVar[str] = "approval_relayed"

    run_id: str = Field(..., description="Run asking.")
    approval_id: str = Field(..., description="The runner's approval id.")
    short_id: str = Field(..., description="Short id people answer with (unambiguous alphabet).")
    conversation: str = Field(..., description="Chat it was posted to.")
    thread: str | None = Field(None, description="Thread it was posted in.")


# -- request/reply: nexus.channels.v1.pairings (nexus-channel-gateway) -------------------------


class PairingsRequest(BaseModel):
    """Body of ``nexus.channels.v1.pairings``: the gateway's allowlist and pairing codes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    include_expired: bool = Field(
        False, description="Also pending codes past their expiry (else only live ones)."
    )


class PairingView(BaseModel):
    """One sender of one channel as the gateway's tables hold it (kept beyond the stream)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    channel: str = Field(..., description="Channel token: slack, telegram, a webhook source.")
    user: str = Field(..., description="Sender's id in the channel.")
    status: Literal["pending", "expired", "approved"] = Field(
        ..., description="pending (a live code), expired (a code past expiry), approved."
    )
    code: str | None = Field(None, description="The pairing code (pending) or the one approved.")
    expires_at: datetime | None = Field(None, description="When a pending code expires.")
    name: str | None = Field(None, description="Sender's display name, if the channel said.")
    seq: int | None = Field(
        None, description="NEXUS_CHANNELS sequence of the approval (revocations key on it)."
    )


class PairingsReply(BaseModel):
    """Paired senders and pairing codes; revoked senders are simply absent."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pairings: list[PairingView] = Field(
        default_factory=list, description="Approved senders and pending (or expired) codes."
    )


class _ConversationEvent(Event):
    """A chat conversation (docs/channels.md, "Conversations"): a thread in which each message
    starts a run of one agent that knows the conversation so far. Folded by the gateway into
    `channels.conversations`, which a rebuild reads back from NEXUS_CHANNELS."""

    event_family: ClassVar[Family] = Family.CHANNEL

    conversation_id: str = Field(..., description="The conversation (derived from its thread).")


@register
class ConversationTurn(_ConversationEvent):
    """A person's message started a run of the conversation's agent."""

    event_name: ClassVar[str] = "conversation_turn"

    address: ChannelAddress = Field(..., description="The thread the conversation lives in.")
    agent_id: str = Field(..., description="The conversation's agent.")
    run_id: str = Field(..., description="The run the message started.")
    text: str = Field(..., max_length=20_000, description="What the person wrote.")
    user: str | None = Field(None, description="Who wrote it (channel user id).")


@register
class ConversationAnswered(_ConversationEvent):
    """A run of the conversation ended: what it answered (its summary, or why it failed)."""

    event_name: ClassVar[str] = "conversation_answered"

    run_id: str = Field(..., description="The run that answered.")
    text: str = Field(..., max_length=20_000, description="The answer.")


@register
class ConversationEnded(_ConversationEvent):
    """The conversation ended: `abandoned` after its idle time. A later message in the thread
    starts it afresh."""

    event_name: ClassVar[str] = "conversation_ended"

    reason: Literal["abandoned"] = Field(..., description="Why it ended.")
    idle_seconds: float = Field(0.0, ge=0, description="How long it had been idle.")
