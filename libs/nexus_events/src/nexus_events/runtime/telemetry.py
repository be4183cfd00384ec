"""OpenTelemetry setup from the environment, and W3C trace context in NATS headers.

There is no official nats-py instrumentation, so publishers `inject` the current context into
the message headers and consumers `extract` it and open a CONSUMER span as its child: one
trace then follows a run from `requested` to its terminal event across services.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

TRACER_NAME = "nexus"

# Environment variables carrying a trace context into a process (the runner started by the
# scheduler): the W3C header values, as OTel's env-carrier convention names them.
TRACEPARENT_ENV = "TRACEPARENT"
TRACESTATE_ENV = "TRACESTATE"
# Tests and debugging: also write finished spans as JSON lines to this file (appended).
SPANS_FILE_ENV = "NEXUS_OTEL_SPANS_FILE"

# The provider the last `setup_telemetry` call made. OTel lets a process set its global
# provider only once; Nexus spans come from this one, so a second setup (tests, a CLI that
# embeds several services) still gets its own spans instead of silently losing them.
_installed: dict[str, TracerProvider] = {}


def setup_telemetry(
    service: str,
    *,
    exporter: SpanExporter | None = None,
    env: Mapping[str, str] | None = None,
) -> TracerProvider | None:
    """Install a TracerProvider for `service` and return it.

    With `exporter` given (tests: InMemorySpanExporter) spans go there. Otherwise spans are
    exported over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; with neither, or with
    ``OTEL_SDK_DISABLED=true``, nothing is installed and None is returned (spans are no-ops).
    ``NEXUS_OTEL_SPANS_FILE`` adds a JSON-lines file of the finished spans (tests, debugging:
    a test reads the spans of a runner it started as a process).
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    exporters: list[SpanExporter] = []
    if exporter is not None:
        exporters.append(exporter)
    elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter())
    if spans_file := env.get(SPANS_FILE_ENV):
        exporters.append(JsonLinesSpanExporter(Path(spans_file)))
    if not exporters:
        return None
    name = env.get("OTEL_SERVICE_NAME", f"nexus-{service}")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    for each in exporters:
        if type(each).__name__ == "InMemorySpanExporter":
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor

            provider.add_span_processor(SimpleSpanProcessor(each))
        else:
            provider.add_span_processor(BatchSpanProcessor(each))
    _installed["provider"] = provider
    trace.set_tracer_provider(provider)  # takes effect only the first time in a process
    return provider


def shutdown_telemetry(timeout_millis: int = 5000) -> None:
    """Export the spans still buffered and stop the provider `setup_telemetry` made.

    Call it before a short-lived process (the runner) exits: the batch processor exports in
    the background and would lose the last spans otherwise.
    """
    provider = _installed.pop("provider", None)
    if provider is None:
        return
    provider.force_flush(timeout_millis)
    provider.shutdown()


def enabled() -> bool:
    """Whether spans are recorded: `setup_telemetry` installed an SDK provider."""
    return "provider" in _installed or not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


def tracer() -> trace.Tracer:
    """The Nexus tracer: from the provider `setup_telemetry` made last, else the global one."""
    provider = _installed.get("provider")
    if provider is not None:
        return provider.get_tracer(TRACER_NAME)
    return trace.get_tracer(TRACER_NAME)


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add ``traceparent``/``tracestate`` of the current span to `headers` (in place)."""
    propagate.inject(headers)
    return headers


def extract(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context carried by `headers` (an empty context if none)."""
    return propagate.extract(dict(headers or {}))


@contextmanager
def consumer_span(
    name: str, headers: Mapping[str, str] | None, attributes: Mapping[str, Any] | None = None
) -> Iterator[Span]:
    """A CONSUMER span, child of the context in `headers`, current inside the block."""
    with tracer().start_as_current_span(
        name, context=extract(headers), kind=SpanKind.CONSUMER, attributes=dict(attributes or {})
    ) as span:
        yield span


def run_traceparent(run_id: str) -> str:
    """A W3C traceparent derived from the run id alone.

    A run requested without trace headers (a bare ``nats pub``, a CLI without tracing) still
    gets one trace: every service that sees such an event continues this same derived
    context, so the trace id is a function of the run id and easy to find.
    """
    trace_id = hashlib.blake2b(run_id.encode(), digest_size=16, person=b"nexus-trace").hexdigest()
    span_id = hashlib.blake2b(run_id.encode(), digest_size=8, person=b"nexus-root").hexdigest()
    return f"00-{trace_id}-{span_id}-01"


def envelope_headers(
    traceparent: str | None, tracestate: str | None = None, *, run_id: str | None = None
) -> dict[str, str]:
    """The W3C headers of a decoded envelope's trace fields. Without a traceparent: the
    run's derived context (`run_traceparent`) when `run_id` is given, else empty."""
    if not traceparent:
        return {"traceparent": run_traceparent(run_id)} if run_id else {}
    headers = {"traceparent": traceparent}
    if tracestate:
        headers["tracestate"] = tracestate
    return headers


def trace_env(context: otel_context.Context | None = None) -> dict[str, str]:
    """``TRACEPARENT``/``TRACESTATE`` of the current span (or `context`), for a child process
    or pod; empty when there is no valid span."""
    headers: dict[str, str] = {}
    propagate.inject(headers, context=context)
    out = {}
    if "traceparent" in headers:
        out[TRACEPARENT_ENV] = headers["traceparent"]
        if headers.get("tracestate"):
            out[TRACESTATE_ENV] = headers["tracestate"]
    return out


def context_from_env(env: Mapping[str, str] | None = None) -> otel_context.Context | None:
    """The trace context a parent process passed in ``TRACEPARENT`` (None if absent)."""
    env = os.environ if env is None else env
    traceparent = env.get(TRACEPARENT_ENV)
    if not traceparent:
        return None
    return extract(envelope_headers(traceparent, env.get(TRACESTATE_ENV)))


class JsonLinesSpanExporter(SpanExporter):
    """Appends each finished span as one JSON object per line (tests and debugging only).

    Several processes may share the file: each line is written with one ``write`` on a file
    opened in append mode.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s), default=str) + "\n" for s in spans)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """A finished span as plain JSON data (ids as 32/16 hex digits, as in traceparent)."""
    ctx = span.get_span_context()
    assert ctx is not None
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent is not None else None,
        "kind": span.kind.name,
        "service": span.resource.attributes.get("service.name"),
        "attributes": {k: _plain(v) for k, v in (span.attributes or {}).items()},
        "status": span.status.status_code.name,
        "start_time": span.start_time,
        "end_time": span.end_time,
    }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
