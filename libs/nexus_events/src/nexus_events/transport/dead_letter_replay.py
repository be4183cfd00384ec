"""Reading dead letters back and replaying one onto its original subject, once: the same
code for `nexus dlq` and the console.

A replay carries ``Nats-Msg-Id: dlq-replay:<dlq seq>``, so the stream that stores the
original subject drops a second replay of the same letter as a duplicate, for as long as
that stream's duplicate window lasts (`streams.DUPLICATE_WINDOW_SECONDS`, two minutes by
default); a replay after the window publishes again.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import datetime

import nats.js.errors
from nats.js.api import PubAck

from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ
from nexus_events.errors import DecodeError
from nexus_events.events import DeadLetter
from nexus_events.transport.bus import Bus, decode_msg

# Headers that belong to the original delivery, not to a replay.
DROP_HEADERS = frozenset({"Nats-Msg-Id", "Nats-Expected-Stream", "Nats-Expected-Last-Sequence"})


class LetterError(Exception):
    """A dead letter that cannot be read or replayed; `missing`: no such letter/original."""

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True, slots=True)
class StoredLetter:
    seq: int
    at: datetime | None
    letter: DeadLetter


def replay_msg_id(seq: int) -> str:
    return f"dlq-replay:{seq}"


async def read_letter(bus: Bus, seq: int) -> DeadLetter:
    try:
        raw = await bus.js.get_msg(DLQ, seq)
    except nats.js.errors.NotFoundError:
        raise LetterError(f"no dead letter {seq}", missing=True) from None
    try:
        return DeadLetter.model_validate_json(raw.data or b"{}")
    except ValueError:
        raise LetterError(f"message {seq} of {DLQ} is not a dead letter", missing=False) from None


async def list_letters(bus: Bus, service: str | None) -> list[StoredLetter]:
    """Dead letters on NEXUS_DLQ (of one service, or all), oldest first."""
    subject = (
        subjects.dead_letter(service) if service else subjects.family_filter(subjects.Family.DLQ)
    )
    letters = []
    async for msg in bus.replay_raw(DLQ, filter_subject=subject):
        try:
            d = decode_msg(msg)
        except DecodeError:
            continue
        if isinstance(d.event, DeadLetter):
            letters.append(StoredLetter(d.envelope.stream_seq or 0, d.envelope.timestamp, d.event))
    return letters


async def original_of(bus: Bus, seq: int, letter: DeadLetter) -> tuple[bytes, dict[str, str]]:
    """The original body and headers: from the letter, or, when the letter kept only part of
    them, from the original's stream (checked against the letter's digest)."""
    if not letter.body_truncated and not letter.headers_truncated:
        body = (
            base64.b64decode(letter.body)
            if letter.body_encoding == "base64"
            else letter.body.encode()
        )
        return body, dict(letter.headers)
    if not letter.stream or not letter.stream_seq:
        raise LetterError(
            f"dead letter {seq} holds a truncated copy and no position of the original",
            missing=False,
        )
    try:
        raw = await bus.js.get_msg(letter.stream, letter.stream_seq)
    except nats.js.errors.NotFoundError:
        raise LetterError(
            f"dead letter {seq} holds a truncated copy and the original is gone from "
            f"{letter.stream} (seq {letter.stream_seq}): nothing whole to replay",
            missing=True,
        ) from None
    data = raw.data or b""
    if letter.body_sha256 and hashlib.sha256(data).hexdigest() != letter.body_sha256:
        raise LetterError(
            f"{letter.stream} seq {letter.stream_seq} is not the original of dead letter {seq}"
            " (digest differs)",
            missing=False,
        )
    return data, dict(raw.headers or {})


async def replay_letter(bus: Bus, seq: int, publish_timeout: float) -> tuple[DeadLetter, PubAck]:
    """Publish dead letter `seq`'s original on its subject; the ack's `duplicate` is True
    when an earlier replay of it is still within the stream's duplicate window."""
    letter = await read_letter(bus, seq)
    data, original_headers = await original_of(bus, seq, letter)
    headers = {k: v for k, v in original_headers.items() if k not in DROP_HEADERS}
    headers["Nats-Msg-Id"] = replay_msg_id(seq)
    try:
        ack = await bus.js.publish(letter.subject, data, headers=headers, timeout=publish_timeout)
    except nats.js.errors.NoStreamResponseError:
        raise LetterError(f"no stream stores {letter.subject}", missing=False) from None
    return letter, ack
