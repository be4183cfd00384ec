"""Metrics export for every service: `setup_metrics` builds the MeterProvider.

OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, and/or a Prometheus ``/metrics`` endpoint
(`MetricsSettings.prometheus_port`) where no collector is used. Each service records its own
instruments on it; the system's run metrics, derived from the event stream, are core's
(`nexus_core.run_metrics`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

METER_NAME = "nexus"


class MetricsSettings(BaseSettings):
    """How a service exports its metrics. Env: NEXUS_METRICS_<FIELD>.

    OTLP export is configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables.
    """

    model_config = SettingsConfigDict(env_prefix="NEXUS_METRICS_", extra="ignore")

    export_interval: float = Field(15.0, gt=0, description="Seconds between OTLP exports.")
    prometheus_port: int | None = Field(
        None, ge=0, le=65535, description="Serve Prometheus /metrics on this port; None = off."
    )
    prometheus_host: str = Field("0.0.0.0", description="Bind address of /metrics.")  # noqa: S104


def setup_metrics(
    service: str,
    settings: MetricsSettings | None = None,
    *,
    readers: Sequence[MetricReader] = (),
    env: Mapping[str, str] | None = None,
) -> SdkMeterProvider:
    """A MeterProvider for `service` exporting to OTLP and/or Prometheus, plus `readers`.

    OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._METRICS_ENDPOINT``) is set in
    `env` (default: the process environment); a Prometheus endpoint when
    `settings.prometheus_port` is set. With neither and no `readers`, the provider records
    but exports nothing. The provider is returned, not installed globally: record on it.
    """
    settings = settings or MetricsSettings()
    env = os.environ if env is None else env
    all_readers = list(readers)
    if env.get("OTEL_SDK_DISABLED", "").lower() != "true" and (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    ):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        all_readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(), export_interval_millis=settings.export_interval * 1000
            )
        )
    if settings.prometheus_port is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        all_readers.append(PrometheusMetricReader())
        start_http_server(settings.prometheus_port, addr=settings.prometheus_host)
    name = env.get("OTEL_SERVICE_NAME", f"nexus-{service}")
    return SdkMeterProvider(
        metric_readers=all_readers, resource=Resource.create({"service.name": name})
    )


__all__ = ["METER_NAME", "MetricsSettings", "setup_metrics"]
