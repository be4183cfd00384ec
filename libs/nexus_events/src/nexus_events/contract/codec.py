"""The envelope: event objects to NATS subject/body/headers and back (docs/design.md §4.1).

Metadata travels in headers, the body is the event's plain JSON. A message published by
hand with no headers (``nats pub``) still decodes: the event id, schema and source are then
derived from the subject and the JetStream metadata.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from nexus_events.contract.subjects import Family, ParsedSubject, has_event_token, parse_subject
from nexus_events.errors import (
    DecodeError,
    InvalidEvent,
    InvalidSubject,
    UndecodableMessage,
    UnknownEvent,
    UnregisteredEvent,
)
from nexus_events.events.base import Event, lookup

# Header names (docs/design.md §4.1).
MSG_ID = "Nats-Msg-Id"
SCHEMA = "Nexus-Schema"
SOURCE = "Nexus-Source"
CORRELATION_ID = "Nexus-Correlation-Id"
CAUSATION_ID = "Nexus-Causation-Id"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

# Source recorded for messages that arrive without a Nexus-Source header.
UNKNOWN_SOURCE = "external"

# Families whose subject has no event token: the body's `type` names the message, else this.
_DEFAULT_TYPE = {
    Family.LOG: "line",
    Family.INBOX: "message",
    Family.ROUTE: "delegation",
    Family.TRANSCRIPT: "entry",
    Family.DLQ: "dead_letter",
}


@dataclass(slots=True)
class Envelope:
    """Everything about a message except its body (read-only by convention; slots for speed)."""

    subject: str
    event_id: str
    schema: str
    source: str
    correlation_id: str | None = None
    causation_id: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    stream: str | None = None
    stream_seq: int | None = None
    timestamp_ns: int | None = None
    num_delivered: int = 1
    _timestamp: datetime | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def timestamp(self) -> datetime | None:
        """When JetStream stored the message (UTC)."""
        if self._timestamp is None and self.timestamp_ns is not None:
            # Kept: projections read it several times per event.
            self._timestamp = datetime.fromtimestamp(self.timestamp_ns / 1e9, tz=UTC)
        return self._timestamp


@dataclass(slots=True)
class Decoded:
    """A decoded message: the event, its envelope and its parsed subject."""

    event: Event
    envelope: Envelope
    address: ParsedSubject


@dataclass(slots=True)
class JsMeta:
    """The JetStream delivery metadata the codec needs (kept free of nats-py types)."""

    stream: str
    stream_seq: int
    timestamp_ns: int | None = None
    num_delivered: int = 1
    consumer_seq: int = 0
    num_pending: int = 0

    @classmethod
    def from_reply(cls, reply: str | None) -> JsMeta | None:
        """Parse a ``$JS.ACK...`` reply subject, or None if it is not one.

        ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>`` (9 tokens) or
        ``$JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>.
        <token>`` (12). Cheaper than nats-py's Metadata, which builds a datetime per message.
        """
        if not reply or not reply.startswith("$JS.ACK."):
            return None
        t = reply.split(".")
        try:
            if len(t) == 9:
                return cls(t[2], int(t[5]), int(t[7]), int(t[4]), int(t[6]), int(t[8]))
            if len(t) >= 12:
                return cls(t[4], int(t[7]), int(t[9]), int(t[6]), int(t[8]), int(t[10]))
        except ValueError:
            return None
        return None


@dataclass(slots=True)
class Encoded:
    subject: str
    body: bytes
    headers: dict[str, str]


def content_id(subject: str, body: bytes) -> str:
    """Deterministic event id: the same event on the same subject always gets the same id,
    so a retried publish is dropped by JetStream's duplicate window."""
    digest = hashlib.blake2b(body, digest_size=16, person=b"nexus-event-id")
    digest.update(b"\0" + subject.encode())
    return digest.hexdigest()


def encode(
    subject: str,
    event: Event,
    *,
    source: str,
    msg_id: str | None = None,
    correlation_id: str | None = None,
    causation_id: str | None = None,
    headers: dict[str, str] | None = None,
    check_subject: bool = True,
) -> Encoded:
    """Encode `event` for `subject`; raise `InvalidSubject` if they do not belong together.

    Without `msg_id` the event id is `content_id(subject, body)`.
    """
    if check_subject:
        _check_subject(subject, event)
    body = event.model_dump_json(exclude_none=True).encode()
    out = dict(headers) if headers else {}
    out[MSG_ID] = msg_id or content_id(subject, body)
    out[SCHEMA] = event.schema_name()
    out[SOURCE] = source
    if correlation_id:
        out[CORRELATION_ID] = correlation_id
    if causation_id:
        out[CAUSATION_ID] = causation_id
    return Encoded(subject=subject, body=body, headers=out)


def _check_subject(subject: str, event: Event) -> None:
    address = parse_subject(subject)
    if address.family is not event.event_family:
        raise InvalidSubject(
            f"{type(event).__name__} is a {event.event_family} event, "
            f"not publishable on {subject!r}"
        )
    if has_event_token(address.family) and event_key(address, {}) != event.event_name:
        raise InvalidSubject(
            f"{type(event).__name__} ({event.event_name}) does not match subject {subject!r}"
        )


def event_key(address: ParsedSubject, body: dict[str, Any]) -> str:
    """The registry name of a message: from the subject, or the body's `type` where the
    family has no event token."""
    if address.family is Family.CATALOG:
        return f"{address.ids['kind']}.{address.event}"
    if address.event is not None:
        return address.event
    kind = body.get("type")
    return kind if isinstance(kind, str) else _DEFAULT_TYPE[address.family]


def parse_body(subject: str, data: bytes) -> dict[str, Any]:
    """The body as a JSON object, or `UndecodableMessage`."""
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UndecodableMessage(f"body is not UTF-8 JSON: {exc}", subject=subject) from None
    if not isinstance(body, dict):
        raise UndecodableMessage(
            f"body must be a JSON object, got {type(body).__name__}", subject=subject
        )
    return body


def decode(
    subject: str,
    data: bytes,
    headers: dict[str, str] | None = None,
    meta: JsMeta | None = None,
) -> Decoded:
    """Decode one message into its event and envelope.

    Raises a `DecodeError` subclass: `UndecodableMessage` (not JSON), `UnknownEvent`
    (subject fits no registered event), `InvalidEvent` (the model rejects the body).
    """
    headers = headers or {}
    try:
        address = parse_subject(subject)
    except InvalidSubject as exc:
        raise UnknownEvent(str(exc), subject=subject) from None
    if address.event is None and b'"type"' in data:
        # The body names the message: parse it once to find the model.
        body = parse_body(subject, data)
        model = _model_for(address, event_key(address, body), subject)
        event = _validate(model, body, subject)
    else:
        # Fast path: the subject names the model; pydantic parses the raw JSON itself.
        model = _model_for(address, event_key(address, {}), subject)
        try:
            event = model.model_validate_json(data)
        except ValidationError as exc:
            # Tell "not JSON at all" apart from "JSON of the wrong shape".
            parse_body(subject, data)  # raises UndecodableMessage for non-JSON / non-objects
            raise InvalidEvent(f"{model.__name__}: {_summarize(exc)}", subject=subject) from None
    # Positional: this runs for every message of a replay, and keywords cost more.
    get = headers.get
    envelope = Envelope(
        subject,
        get(MSG_ID) or _default_id(subject, data, meta),
        get(SCHEMA) or model.schema_name(),
        get(SOURCE) or UNKNOWN_SOURCE,
        get(CORRELATION_ID),
        get(CAUSATION_ID),
        get(TRACEPARENT),
        get(TRACESTATE),
    )
    if meta is not None:
        envelope.stream = meta.stream
        envelope.stream_seq = meta.stream_seq
        envelope.timestamp_ns = meta.timestamp_ns
        envelope.num_delivered = meta.num_delivered
    return Decoded(event=event, envelope=envelope, address=address)


def _model_for(address: ParsedSubject, key: str, subject: str) -> type[Event]:
    try:
        return lookup(address.family, key)
    except UnregisteredEvent as exc:
        raise UnknownEvent(f"{exc} (subject {subject!r})", subject=subject) from None


def _validate(model: type[Event], body: dict[str, Any], subject: str) -> Event:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise InvalidEvent(f"{model.__name__}: {_summarize(exc)}", subject=subject) from None


def _default_id(subject: str, data: bytes, meta: JsMeta | None) -> str:
    # A hand-published message has no id; its place in the stream identifies it for good.
    if meta is not None:
        return f"{meta.stream}:{meta.stream_seq}"
    return content_id(subject, data)


def _summarize(exc: ValidationError) -> str:
    """One line naming each bad field, e.g. ``agent_id: Field required; x: Extra inputs...``."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(body)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


__all__ = [
    "CAUSATION_ID",
    "CORRELATION_ID",
    "MSG_ID",
    "SCHEMA",
    "SOURCE",
    "TRACEPARENT",
    "TRACESTATE",
    "DecodeError",
    "Decoded",
    "Encoded",
    "Envelope",
    "JsMeta",
    "content_id",
    "decode",
    "encode",
    "event_key",
    "parse_body",
]
