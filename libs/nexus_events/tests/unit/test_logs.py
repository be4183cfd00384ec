"""JSON log lines carry the service, bound and extra fields, the trace and the traceback."""

from __future__ import annotations

import asyncio
import json
import logging

from nexus_events.runtime.logs import JsonFormatter, bind, setup_logging
from opentelemetry.sdk.trace import TracerProvider


def _record(msg: str = "hello %s", *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("nexus.test", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_a_line_is_one_json_object_with_the_extras():
    line = json.loads(JsonFormatter("core").format(_record("hello %s", "you", stream_seq=7)))
    assert line["message"] == "hello you"
    assert line["service"] == "core"
    assert line["level"] == "WARNING"
    assert line["logger"] == "nexus.test"
    assert line["stream_seq"] == 7
    assert "trace_id" not in line  # no span is current


def test_the_current_span_gives_trace_and_span_ids():
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        line = json.loads(JsonFormatter("runner").format(_record()))
    ctx = span.get_span_context()
    assert line["trace_id"] == format(ctx.trace_id, "032x")
    assert line["span_id"] == format(ctx.span_id, "016x")


def test_bound_fields_reach_lines_of_tasks_started_after_binding():
    async def main() -> dict[str, object]:
        bind(run_id="run_42")

        async def child() -> dict[str, object]:
            return json.loads(JsonFormatter("runner").format(_record()))

        return await asyncio.create_task(child())

    assert asyncio.run(main())["run_id"] == "run_42"
    # Bound in that context only: nothing leaks into this one.
    assert "run_id" not in json.loads(JsonFormatter("runner").format(_record()))


def test_exceptions_are_kept_with_their_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = _record("failed")
        record.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter("core").format(record))
    assert "ValueError: boom" in line["exception"]


def test_setup_chooses_text_or_json_and_the_level():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        setup_logging("core", env={"NEXUS_LOG_FORMAT": "text", "NEXUS_LOG_LEVEL": "debug"})
        assert not isinstance(root.handlers[0].formatter, JsonFormatter)
        assert root.level == logging.DEBUG
        setup_logging("core", env={})
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        assert root.level == logging.INFO
        assert len(root.handlers) == 1
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
