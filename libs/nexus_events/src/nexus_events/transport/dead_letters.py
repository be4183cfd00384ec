"""Dead letters: building ones that always fit in one NATS message, and filing them.

A poison message can be as large as the server's max_payload; a copy of it plus headers and
the reason would not fit, and a dead letter that cannot be published would leave its consumer
stuck on it. So the body is capped (its size and SHA-256 are kept, and the original stays in
its stream at `stream_seq`), headers are capped, and when even that is refused a reference-only
letter (no body, no headers) is the last resort. The builders are pure functions;
`DeadLetterPublisher` (a part of `Bus`) files them on ``nexus.dlq.v1.<service>``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import nats.errors
from nats.aio.msg import Msg

from nexus_events.contract import subjects
from nexus_events.errors import PublishRejected
from nexus_events.events.dlq import DeadLetter
from nexus_events.transport.publish import Publisher

log = logging.getLogger(__name__)

# Bytes of the original body kept in a dead letter: enough to read what it was, far below the
# 1 MiB default max_payload even after base64 (4/3) and the rest of the letter.
MAX_BODY_BYTES = 64 * 1024
# Header values and the header set as a whole: a message may carry large custom headers.
MAX_HEADER_VALUE_CHARS = 1024
MAX_HEADERS_CHARS = 8 * 1024
# The one-line error kept with the letter.
MAX_ERROR_CHARS = 2000


def _cap_body(data: bytes, cap: int) -> tuple[str, str, bool]:
    """(body, encoding, truncated): UTF-8 text when the kept bytes decode, else base64."""
    truncated = len(data) > cap
    kept = data[:cap]
    # A cut through a multi-byte character (at most 3 bytes of it) is no reason for base64.
    for drop in range(4 if truncated else 1):
        try:
            return kept[: len(kept) - drop].decode(), "utf-8", truncated
        except UnicodeDecodeError:
            continue
    return base64.b64encode(kept).decode(), "base64", truncated


def _cap_headers(headers: dict[str, str]) -> tuple[dict[str, str], bool]:
    out: dict[str, str] = {}
    total = 0
    truncated = False
    for key, value in headers.items():
        kept = value[:MAX_HEADER_VALUE_CHARS]
        size = len(key) + len(kept)
        if len(kept) < len(value) or total + size > MAX_HEADERS_CHARS:
            truncated = True
        if total + size > MAX_HEADERS_CHARS:
            continue
        out[key] = kept
        total += size
    return out, truncated


def build_dead_letter(
    *,
    service: str,
    subject: str,
    data: bytes,
    headers: dict[str, str],
    reason: str,
    error: str,
    consumer: str | None,
    stream: str | None,
    stream_seq: int | None,
    num_delivered: int,
    body_cap: int = MAX_BODY_BYTES,
) -> DeadLetter:
    """The dead letter of one original message, within the caps."""
    body, encoding, truncated = _cap_body(data, body_cap)
    kept_headers, headers_truncated = _cap_headers(headers)
    lines = error.splitlines() if error else []
    return DeadLetter(
        service=service,
        consumer=consumer,
        stream=stream,
        stream_seq=stream_seq,
        subject=subject,
        headers=kept_headers,
        body=body,
        body_encoding=encoding,
        body_size=len(data),
        body_sha256=hashlib.sha256(data).hexdigest(),
        body_truncated=truncated,
        headers_truncated=headers_truncated,
        reason=reason,
        error=(lines[0] if lines else reason)[:MAX_ERROR_CHARS],
        num_delivered=num_delivered,
    )


def reference_only(letter: DeadLetter) -> DeadLetter:
    """The same letter without body and headers: the original is found by stream + sequence."""
    return letter.model_copy(
        update={
            "body": "",
            "body_encoding": "utf-8",
            "body_truncated": bool(letter.body_size),
            "headers": {},
            "headers_truncated": bool(letter.headers) or letter.headers_truncated,
            "error": letter.error[:500],
        }
    )


def dead_letter_id(stream: str | None, stream_seq: int | None) -> str | None:
    """Nats-Msg-Id of a dead letter: one per stored original, from its stream position
    alone, so NEXUS_DLQ's dedupe keeps the first whichever reader files it (two services
    reading one subject, like core's poison sweeper and the gateway's delegations, or one
    consumer meeting it again after a redelivery or a restart). None when the original has no
    stream position (nothing stable to key it by)."""
    if not stream or not stream_seq:
        return None
    return f"dlq:{stream}:{stream_seq}"


class DeadLetterPublisher(Publisher):
    """A `Publisher` that also files dead letters for its service."""

    async def dead_letter(
        self,
        msg: Msg,
        *,
        reason: str,
        error: str,
        consumer: str | None = None,
        num_delivered: int | None = None,
    ) -> bool:
        """Copy `msg` to ``nexus.dlq.v1.<source>`` with the reason (see `file_dead_letter`)."""
        stream = seq = None
        with contextlib.suppress(nats.errors.NotJSMessageError, ValueError, AttributeError):
            stream, seq = msg.metadata.stream, msg.metadata.sequence.stream
            if num_delivered is None:
                num_delivered = msg.metadata.num_delivered
        return await self.file_dead_letter(
            build_dead_letter(
                service=self.source,
                subject=msg.subject,
                data=msg.data,
                headers=dict(msg.headers or {}),
                reason=reason,
                error=error,
                consumer=consumer,
                stream=stream,
                stream_seq=seq,
                num_delivered=num_delivered or 0,
            )
        )

    async def dead_letter_unacknowledged(
        self, stream: str, consumer: str, advisory: Mapping[str, Any]
    ) -> bool:
        """File the message a MAX_DELIVERIES advisory names (its last delivery timed out, so
        the server never redelivers it), read back from `stream`; see `file_dead_letter`."""
        seq = int(advisory["stream_seq"])
        raw = await self.js.get_msg(stream, seq)
        deliveries = advisory.get("deliveries")
        return await self.file_dead_letter(
            build_dead_letter(
                service=self.source,
                subject=raw.subject or "",
                data=raw.data or b"",
                headers=dict(raw.headers or {}),
                reason="max_deliver",
                error=f"not acknowledged after {deliveries} deliveries",
                consumer=consumer,
                stream=stream,
                stream_seq=seq,
                num_delivered=int(deliveries or 0),
            )
        )

    async def file_dead_letter(self, letter: DeadLetter) -> bool:
        """Publish `letter` (built with `nexus_events.transport.dead_letters.build_dead_letter`, so
        it fits); return whether it was stored.

        Idempotent per stored original (`dead_letter_id`), within NEXUS_DLQ's duplicate
        window (a day): the first reader's letter is kept. If the server still refuses
        the letter, a reference-only letter (stream + sequence, size, digest) is tried, and if
        that is refused too the failure is logged with the original's position and False
        returned: a consumer must then go past the message rather than stop on it. Raises
        `BusUnavailable` / `PublishFailed` when NATS is away (try again later).
        """
        dlq_subject = subjects.dead_letter(letter.service)
        msg_id = dead_letter_id(letter.stream, letter.stream_seq)
        where = {
            "stream": letter.stream,
            "stream_seq": letter.stream_seq,
            "consumer": letter.consumer,
        }
        try:
            await self.publish(dlq_subject, letter, msg_id=msg_id)
        except PublishRejected as exc:
            # The reason is the whole story; a traceback would only repeat it.
            log.error("dead letter refused, storing a reference only: %s", exc, extra=where)  # noqa: TRY400
            try:
                await self.publish(dlq_subject, reference_only(letter), msg_id=msg_id)
            except PublishRejected as again:
                log.error(  # noqa: TRY400
                    "could not dead-letter %s (%s) at all; the original stays in %s at %s: %s",
                    letter.subject,
                    letter.reason,
                    letter.stream,
                    letter.stream_seq,
                    again,
                    extra=where,
                )
                return False
        log.warning(
            "dead-lettered %s (%s): %s", letter.subject, letter.reason, letter.error, extra=where
        )
        return True


__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADERS_CHARS",
    "DeadLetterPublisher",
    "build_dead_letter",
    "dead_letter_id",
    "reference_only",
]
