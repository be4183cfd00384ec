"""One rule for which trace a handled event's span continues (nexus_events.contract.spans)."""

from __future__ import annotations

import json

from nexus_events.contract import codec, spans, subjects
from nexus_events.contract.codec import JsMeta
from nexus_events.events.runs import RunRequested
from nexus_events.runtime import telemetry
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _trace_id(ctx: object) -> str:
    return format(trace.get_current_span(ctx).get_span_context().trace_id, "032x")  # type: ignore[arg-type]


def _requested(run_id: str, headers: dict[str, str] | None) -> codec.Decoded:
    subject = subjects.run_event(run_id, "requested")
    body = json.dumps({"agent_id": "implementer"}).encode()
    return codec.decode(subject, body, headers, JsMeta("NEXUS_RUNS", 7, timestamp_ns=10**9))


def test_an_events_own_headers_win() -> None:
    d = _requested("run-a", {"traceparent": TRACEPARENT})
    known = trace.set_span_in_context(
        NonRecordingSpan(SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(1)))
    )
    assert _trace_id(spans.event_parent(d, known)) == "0af7651916cd43dd8448eb211c80319c"


def test_a_header_less_event_joins_the_known_run_trace_else_the_derived_one() -> None:
    d = _requested("run-b", None)
    known = trace.set_span_in_context(
        NonRecordingSpan(SpanContext(5, 6, is_remote=True, trace_flags=TraceFlags(1)))
    )
    assert _trace_id(spans.event_parent(d, known)) == format(5, "032x")
    derived = telemetry.run_traceparent("run-b").split("-")[1]
    assert _trace_id(spans.event_parent(d)) == derived
    assert spans.event_headers(d) == {"traceparent": telemetry.run_traceparent("run-b")}


def test_event_attributes() -> None:
    d = _requested("run-c", None)
    attrs = spans.event_attributes(d, **{spans.AGENT_ID: "implementer", spans.TASK_ID: None})
    assert attrs == {
        spans.EVENT: "requested",
        spans.SUBJECT: subjects.run_event("run-c", "requested"),
        spans.STREAM_SEQ: 7,
        spans.RUN_ID: "run-c",
        spans.AGENT_ID: "implementer",
    }
    assert isinstance(d.event, RunRequested)
