"""Core's settings, from the environment (prefix ``NEXUS_``; NATS itself: ``NEXUS_NATS_*``)."""

from __future__ import annotations

from nexus_events.runtime.lease import LeaseTtl
from nexus_events.runtime.process import gc_threshold_for_batch
from nexus_events.runtime.settings import (
    ConsumerPrefix,
    HealthPortSetting,
    PoolSize,
    ServiceSettings,
)
from pydantic import Field


class CoreSettings(ServiceSettings):
    health_port: HealthPortSetting = 8080
    consumer_prefix: ConsumerPrefix = "core"
    db_pool_size: PoolSize = 8

    catalog_url: str | None = Field(
        None,
        description="Catalog backend: a mongodb:// URL (motor; the database named in the URL,"
        " else 'nexus'), or None = the PostgreSQL database (schema core).",
    )
    memory_enabled: bool = Field(True, description="Ask memory for context during assembly.")
    # The design's bound on how long a run waits for memory (docs/design.md §5.2).
    memory_timeout: float = Field(0.3, gt=0, le=10, description="Seconds to wait for memory.")
    assembly_concurrency: int = Field(8, gt=0, description="Run ids assembled in parallel.")
    # Most events per projection transaction: big batches let a run's events fold in memory
    # before one row write. Replaying 200k events with runs interleaved 300/500/700 at a
    # time: 2,000 -> 11.8k/7.7k/8.5k ev/s, 5,000 -> 12.1k/12.2k/12.3k, 10,000 no faster.
    # Live, batches are as small as what has arrived.
    projection_batch: int = Field(5000, gt=0, description="Events per projection transaction.")
    gc_threshold: int | None = Field(
        None,
        ge=0,
        description="Net allocations between young garbage collections (startup objects are"
        " frozen); unset: 40 per projection batch event, at least 50,000; 0 keeps Python's"
        " defaults.",
    )
    # Several replicas: the lease holder projects and hosts the metrics, all answer queries
    # and assemble runs. Its own name (not NEXUS_LEASE_BUCKET, the scheduler's): core and the
    # scheduler must never share a lease.
    core_lease_bucket: str = Field(
        "nexus_core_lease",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the lease of the projecting replica.",
    )
    lease_ttl_seconds: LeaseTtl = 10.0

    def effective_gc_threshold(self) -> int:
        """`gc_threshold`, or one sized to keep projection batches out of the collector."""
        if self.gc_threshold is not None:
            return self.gc_threshold
        return gc_threshold_for_batch(self.projection_batch)
