"""What every channel's ingress hands on: a verified message with its dedupe keys, or a
refusal with the HTTP status and the metric outcome it counts as."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexus_events.events.base import Event


@dataclass(frozen=True, slots=True)
class Accepted:
    """A verified inbound event: publish `event` on `subject` with Nats-Msg-Id `key`."""

    channel: str
    key: str
    subject: str
    event: Event
    aliases: tuple[str, ...] = ()
    retry: bool = False  # the platform says this is a resend


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer at once without publishing (url_verification, ignored updates)."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    outcome: str = "ignored"


@dataclass(frozen=True, slots=True)
class Refused:
    """Not verified or not understood: a clear 4xx, counted under `outcome`."""

    status: int
    reason: str
    outcome: str  # forged, stale, malformed, unauthorized


Verdict = Accepted | Reply | Refused


def key_token(*parts: str) -> str:
    """A dedupe key from platform ids: Nats-Msg-Id and PostgreSQL friendly, no spaces."""
    return "-".join(p.replace(" ", "_") for p in parts)
