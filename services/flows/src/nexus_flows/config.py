"""The flows service's settings from the environment (prefix ``NEXUS_``; NATS ``NEXUS_NATS_*``)."""

from __future__ import annotations

from nexus_events.health import HealthPort
from nexus_events.lease import LeaseTtl
from nexus_events.settings import ENV_PREFIX, NexusSettings
from pydantic import Field
from pydantic_settings import SettingsConfigDict


class FlowsSettings(NexusSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/nexus", description="PostgreSQL DSN (asyncpg)."
    )
    db_pool_size: int = Field(4, gt=1, description="Most PostgreSQL connections.")
    projection_batch: int = Field(500, gt=0, description="Events per projection transaction.")
    fetch_timeout: float = Field(1.0, gt=0, le=30, description="Seconds one fetch waits.")
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
    health_host: str = Field("127.0.0.1", description="Bind address of the health endpoint.")
    health_port: HealthPort = Field(
        8086,
        ge=0,
        le=65535,
        description="HTTP port of /healthz and /readyz (0: any free port; off: none).",
    )
    drain_timeout: float = Field(30.0, gt=0, description="Most seconds to drain on SIGTERM.")
    consumer_prefix: str = Field(
        "flows", pattern=r"^[A-Za-z0-9_-]+$", description="Prefix of durable consumer names."
    )
    # Several replicas: the lease holder projects, runs the engine and the bridges (it alone
    # decides); all answer queries. Its own bucket: flows never shares a lease.
    flows_lease_bucket: str = Field(
        "nexus_flows_lease",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the lease of the deciding replica.",
    )
    lease_ttl_seconds: LeaseTtl = 10.0
