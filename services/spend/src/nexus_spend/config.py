"""The spend service's settings from the environment (prefix ``NEXUS_``; NATS ``NEXUS_NATS_*``)."""

from __future__ import annotations

from nexus_events.runtime.lease import LeaseTtl
from nexus_events.runtime.settings import ConsumerPrefix, HealthPortSetting, ServiceSettings
from pydantic import Field


class SpendSettings(ServiceSettings):
    health_port: HealthPortSetting = 8092
    consumer_prefix: ConsumerPrefix = "spend"

    projection_batch: int = Field(500, gt=0, description="Events per projection transaction.")
    # Several replicas: the lease holder projects NEXUS_RUNS (usage, settlement) and closes
    # expired asks; every replica answers reservations and queries (PostgreSQL row locks keep
    # a reservation atomic across replicas).
    spend_lease_bucket: str = Field(
        "nexus_spend_lease",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the lease of the projecting replica.",
    )
    lease_ttl_seconds: LeaseTtl = 10.0
