"""The flows service's settings from the environment (prefix ``NEXUS_``; NATS ``NEXUS_NATS_*``)."""

from __future__ import annotations

from nexus_events.runtime.lease import LeaseTtl
from nexus_events.runtime.settings import ConsumerPrefix, HealthPortSetting, ServiceSettings
from pydantic import Field


class FlowsSettings(ServiceSettings):
    health_port: HealthPortSetting = 8086
    consumer_prefix: ConsumerPrefix = "flows"

    projection_batch: int = Field(500, gt=0, description="Events per projection transaction.")
    # Gates expire, timers fire and event waits time out on this tick: the latency of a due
    # wait is at most one tick.
    timer_interval: float = Field(
        1.0, gt=0, le=60, description="Seconds between checks of due waits (timers, expiries)."
    )
    catalog_timeout: float = Field(
        5.0, gt=0, le=60, description="Seconds to wait for core's catalog to answer a flow get."
    )
    # A flow whose definition could not be fetched (core away) is asked for again this often.
    catalog_retry: float = Field(
        2.0, gt=0, le=300, description="Seconds between retries of an unanswered catalog get."
    )
    engine_concurrency: int = Field(
        16, ge=1, le=256, description="Flow runs the engine steps at once after a batch."
    )
    # Several replicas: the lease holder projects, runs the engine and the bridges (it alone
    # decides); all answer queries. Its own bucket: flows never shares a lease.
    flows_lease_bucket: str = Field(
        "nexus_flows_lease",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the lease of the deciding replica.",
    )
    lease_ttl_seconds: LeaseTtl = 10.0
