"""The envelope codec: event objects <-> subject, JSON body and headers."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from nats.aio.msg import Msg
from nexus_events.contract import codec, subjects
from nexus_events.errors import InvalidEvent, InvalidSubject, UndecodableMessage, UnknownEvent
from nexus_events.events import (
    AgentDeleted,
    InboxMessage,
    LogLine,
    RunCompleted,
    RunHeartbeat,
    RunRequested,
)

RUN = "run_42"


def test_round_trip_with_headers():
    event = RunRequested(agent_id="planner", input="plan it", labels={"team": "a"})
    subject = subjects.run_event(RUN, "requested")
    enc = codec.encode(
        subject,
        event,
        source="cli",
        msg_id="req-1",
        correlation_id="corr-1",
        causation_id="cause-1",
        headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
    )
    assert enc.subject == subject
    assert enc.headers[codec.MSG_ID] == "req-1"
    assert enc.headers[codec.SCHEMA] == "nexus.agent.run.requested/1"
    assert enc.headers[codec.SOURCE] == "cli"

    ts = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ts_ns = int(ts.timestamp()) * 1_000_000_000
    meta = codec.JsMeta(stream="NEXUS_RUNS", stream_seq=7, timestamp_ns=ts_ns, num_delivered=2)
    dec = codec.decode(enc.subject, enc.body, enc.headers, meta)
    assert dec.event == event
    assert type(dec.event) is RunRequested
    env = dec.envelope
    assert env.event_id == "req-1"
    assert env.schema == "nexus.agent.run.requested/1"
    assert env.source == "cli"
    assert env.correlation_id == "corr-1"
    assert env.causation_id == "cause-1"
    assert env.traceparent == enc.headers["traceparent"]
    assert (env.stream, env.stream_seq, env.timestamp, env.num_delivered) == (
        "NEXUS_RUNS",
        7,
        ts,
        2,
    )
    assert dec.address.run_id == RUN
    assert dec.address.event == "requested"


def test_body_is_plain_json_without_nulls():
    enc = codec.encode(subjects.run_event(RUN, "heartbeat"), RunHeartbeat(seq=3), source="x")
    assert json.loads(enc.body) == {"seq": 3, "turn": 0}


def test_decode_without_headers_gets_defaults():
    subject = subjects.run_event(RUN, "completed")
    meta = codec.JsMeta(stream="NEXUS_RUNS", stream_seq=12)
    dec = codec.decode(subject, b'{"message": "done by hand"}', None, meta)
    assert isinstance(dec.event, RunCompleted)
    assert dec.event.message == "done by hand"
    assert dec.envelope.event_id == "NEXUS_RUNS:12"
    assert dec.envelope.schema == RunCompleted.schema_name() == "nexus.agent.run.completed/1"
    assert dec.envelope.source == codec.UNKNOWN_SOURCE == "external"
    assert dec.envelope.correlation_id is None
    assert dec.envelope.num_delivered == 1


def test_decode_without_headers_or_meta_uses_content_id():
    subject = subjects.run_event(RUN, "heartbeat")
    body = b'{"seq": 1}'
    dec = codec.decode(subject, body)
    assert dec.envelope.event_id == codec.content_id(subject, body)
    assert dec.envelope.stream is None


def test_families_without_event_token_use_body_type_or_default():
    inbox = codec.decode(subjects.inbox(RUN), b'{"text": "hello"}')
    assert isinstance(inbox.event, InboxMessage)
    approval = codec.decode(
        subjects.inbox(RUN),
        b'{"type": "approval_decision", "approval_id": "a1", "decision": "approve"}',
    )
    assert type(approval.event).__name__ == "ApprovalDecision"
    log = codec.decode(subjects.run_log(RUN), b'{"seq": 0, "text": "hi"}')
    assert isinstance(log.event, LogLine)


@pytest.mark.parametrize("data", [b"\xff\xfe\x00garbage", b"not json", b"{", b""])
def test_garbage_is_undecodable(data):
    with pytest.raises(UndecodableMessage) as info:
        codec.decode(subjects.run_event(RUN, "heartbeat"), data)
    assert info.value.reason == "undecodable"
    assert info.value.subject == subjects.run_event(RUN, "heartbeat")


@pytest.mark.parametrize("data", [b"[1, 2]", b'"text"', b"3", b"null"])
def test_json_that_is_not_an_object_is_undecodable(data):
    with pytest.raises(UndecodableMessage, match="JSON object"):
        codec.decode(subjects.run_event(RUN, "heartbeat"), data)


def test_wrong_shape_is_invalid_event_naming_the_field():
    subject = subjects.run_event(RUN, "requested")
    with pytest.raises(InvalidEvent) as info:
        codec.decode(subject, b'{"input": "x"}')
    assert info.value.reason == "invalid_event"
    assert "agent_id" in str(info.value)
    assert "RunRequested" in str(info.value)

    with pytest.raises(InvalidEvent, match="agnt_id"):  # a Command forbids a misspelt field
        codec.decode(subject, b'{"agent_id": "a", "agnt_id": "b"}')

    with pytest.raises(InvalidEvent, match="seq"):
        codec.decode(subjects.run_event(RUN, "heartbeat"), b'{"seq": -1}')


@pytest.mark.parametrize(
    "subject",
    [
        subjects.run_event(RUN, "exploded"),
        subjects.catalog_event("agent", "x", "renamed"),
        "nexus.core.v1.runs.get",
        "some.other.subject",
    ],
)
def test_unknown_event_name_or_subject_is_unknown_event(subject):
    with pytest.raises(UnknownEvent) as info:
        codec.decode(subject, b"{}")
    assert info.value.reason == "unknown_event"


def test_unknown_body_type_on_inbox_is_unknown_event():
    with pytest.raises(UnknownEvent):
        codec.decode(subjects.inbox(RUN), b'{"type": "telepathy", "text": "x"}')


def test_encode_refuses_wrong_family():
    with pytest.raises(InvalidSubject, match="run event"):
        codec.encode(subjects.task_event("t1", "heartbeat"), RunHeartbeat(seq=1), source="x")


def test_encode_refuses_wrong_event_name():
    with pytest.raises(InvalidSubject, match="heartbeat"):
        codec.encode(subjects.run_event(RUN, "completed"), RunHeartbeat(seq=1), source="x")


def test_encode_refuses_catalog_kind_mismatch():
    codec.encode(subjects.catalog_event("agent", "a1", "deleted"), AgentDeleted(), source="x")
    with pytest.raises(InvalidSubject):
        codec.encode(subjects.catalog_event("skill", "a1", "deleted"), AgentDeleted(), source="x")


def test_encode_refuses_non_subject():
    with pytest.raises(InvalidSubject):
        codec.encode("nexus.agent.run.v1.*.heartbeat", RunHeartbeat(seq=1), source="x")


def test_content_id_is_deterministic_and_differs_by_body_and_subject():
    s1 = subjects.run_event(RUN, "heartbeat")
    s2 = subjects.run_event("run_43", "heartbeat")
    assert codec.content_id(s1, b'{"seq":1}') == codec.content_id(s1, b'{"seq":1}')
    assert codec.content_id(s1, b'{"seq":1}') != codec.content_id(s1, b'{"seq":2}')
    assert codec.content_id(s1, b'{"seq":1}') != codec.content_id(s2, b'{"seq":1}')


def test_encode_without_msg_id_uses_content_id():
    subject = subjects.run_event(RUN, "heartbeat")
    a = codec.encode(subject, RunHeartbeat(seq=1), source="x")
    b = codec.encode(subject, RunHeartbeat(seq=1), source="y")
    c = codec.encode(subject, RunHeartbeat(seq=2), source="x")
    assert a.headers[codec.MSG_ID] == b.headers[codec.MSG_ID] == codec.content_id(subject, a.body)
    assert a.headers[codec.MSG_ID] != c.headers[codec.MSG_ID]


V1_REPLY = "$JS.ACK.NEXUS_RUNS.core-runs.3.1042.977.1767323045123456789.12"
V2_REPLY = "$JS.ACK._.ACCHASH.NEXUS_RUNS.core-runs.3.1042.977.1767323045123456789.12.tok9"


@pytest.mark.parametrize("reply", [V1_REPLY, V2_REPLY])
def test_js_meta_from_reply_agrees_with_nats_py(reply):
    meta = codec.JsMeta.from_reply(reply)
    assert meta is not None
    md = Msg(None, subject="x", reply=reply).metadata  # type: ignore[arg-type]
    assert meta.stream == md.stream == "NEXUS_RUNS"
    assert meta.stream_seq == md.sequence.stream == 1042
    assert meta.consumer_seq == md.sequence.consumer == 977
    assert meta.num_delivered == md.num_delivered == 3
    assert meta.num_pending == md.num_pending == 12
    assert meta.timestamp_ns == 1767323045123456789
    env = codec.decode(subjects.run_event(RUN, "heartbeat"), b'{"seq": 1}', None, meta).envelope
    assert abs((env.timestamp - md.timestamp).total_seconds()) < 1e-5
    assert env.event_id == "NEXUS_RUNS:1042"


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "_INBOX.abc.def",
        "$JS.ACK.NEXUS_RUNS.c.3.x.977.1.12",  # not a number
        "$JS.ACK.NEXUS_RUNS.c.3.1042",  # too short
    ],
)
def test_js_meta_from_reply_rejects_other_replies(reply):
    assert codec.JsMeta.from_reply(reply) is None
