"""OpenTelemetry setup from the environment, and W3C trace context in NATS headers.

There is no official nats-py instrumentation, so publishers `inject` the current context into
the message headers and consumers `extract` it and open a CONSUMER span as its child: one
trace then follows a run from `requested` to its terminal event across services.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind

TRACER_NAME = "nexus"

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
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    if exporter is None:
        if not env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    name = env.get("OTEL_SERVICE_NAME", f"nexus-{service}")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter is not None and type(exporter).__name__ == "InMemorySpanExporter":
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _installed["provider"] = provider
    trace.set_tracer_provider(provider)  # takes effect only the first time in a process
    return provider


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
