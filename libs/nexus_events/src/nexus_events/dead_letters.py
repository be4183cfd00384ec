"""Building dead letters that always fit in one NATS message, and their idempotency keys.

A poison message can be as large as the server's max_payload; a copy of it plus headers and
the reason would not fit, and a dead letter that cannot be published would leave its consumer
stuck on it. So the body is capped (its size and SHA-256 are kept, and the original stays in
its stream at `stream_seq`), headers are capped, and when even that is refused a reference-only
letter (no body, no headers) is the last resort. Pure functions: no I/O here.
"""

from __future__ import annotations

import base64
import hashlib

from nexus_events.events.dlq import DeadLetter

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


def dead_letter_id(
    service: str, consumer: str | None, stream: str | None, stream_seq: int | None, reason: str
) -> str | None:
    """Nats-Msg-Id of a dead letter: one per original, service, consumer and reason, however
    often the consumer meets it again (redelivery, restart); None when the original has no
    stream position (nothing stable to key it by)."""
    if not stream_seq:
        return None
    return f"dlq:{service}:{consumer or '-'}:{stream}:{stream_seq}:{reason}"


__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADERS_CHARS",
    "build_dead_letter",
    "dead_letter_id",
    "reference_only",
]
