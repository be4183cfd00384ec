"""Dead letters always fit: capped body and headers, size and digest kept, stable ids."""

from __future__ import annotations

import base64
import hashlib

from nexus_events.events import DeadLetter
from nexus_events.transport.dead_letters import (
    MAX_BODY_BYTES,
    MAX_HEADERS_CHARS,
    build_dead_letter,
    dead_letter_id,
    reference_only,
)


def letter(data: bytes, headers: dict[str, str] | None = None, **kw) -> DeadLetter:
    values = {
        "service": "core",
        "subject": "nexus.agent.run.v1.r.turn",
        "data": data,
        "headers": headers or {},
        "reason": "undecodable",
        "error": "boom\nsecond line",
        "consumer": "c",
        "stream": "NEXUS_RUNS",
        "stream_seq": 7,
        "num_delivered": 1,
    }
    values.update(kw)
    return build_dead_letter(**values)


def test_a_small_body_is_kept_whole():
    x = letter(b'{"a": 1}')
    assert x.body == '{"a": 1}'
    assert x.body_encoding == "utf-8"
    assert not x.body_truncated
    assert x.body_size == 8
    assert x.body_sha256 == hashlib.sha256(b'{"a": 1}').hexdigest()
    assert x.error == "boom"


def test_a_binary_body_is_base64_and_a_large_one_is_cut_at_the_cap():
    data = bytes(range(256)) * 1000
    x = letter(data)
    assert x.body_encoding == "base64"
    assert x.body_truncated
    assert base64.b64decode(x.body) == data[:MAX_BODY_BYTES]
    assert x.body_size == len(data)
    assert len(x.model_dump_json()) < 100_000


def test_a_cut_through_a_multibyte_character_stays_text():
    data = ("é" * MAX_BODY_BYTES).encode()  # 2 bytes each: the cap falls inside one
    x = letter(data)
    assert x.body_encoding == "utf-8"
    assert x.body_truncated
    assert data.startswith(x.body.encode())


def test_headers_are_capped_value_by_value_and_in_total():
    headers = {f"H-{i}": "v" * 3000 for i in range(20)}
    x = letter(b"{}", headers)
    assert x.headers_truncated
    assert all(len(v) <= 1024 for v in x.headers.values())
    assert sum(len(k) + len(v) for k, v in x.headers.items()) <= MAX_HEADERS_CHARS


def test_reference_only_keeps_the_position_size_and_digest():
    full = letter(b"x" * 100, {"A": "b"})
    ref = reference_only(full)
    assert (ref.body, ref.headers) == ("", {})
    assert ref.body_truncated
    assert ref.headers_truncated
    assert (ref.stream, ref.stream_seq, ref.body_size, ref.body_sha256) == (
        full.stream,
        full.stream_seq,
        full.body_size,
        full.body_sha256,
    )


def test_ids_name_the_stored_original_alone_and_need_a_position():
    # One stored message, one id: whichever service, consumer or reason files it.
    a = dead_letter_id("NEXUS_INBOX", 16)
    assert a == "dlq:NEXUS_INBOX:16"
    assert len({a, dead_letter_id("NEXUS_INBOX", 17), dead_letter_id("NEXUS_RUNS", 16)}) == 3
    assert dead_letter_id(None, None) is None
    assert dead_letter_id("NEXUS_RUNS", None) is None
