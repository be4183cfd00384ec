"""The lab's settings from the environment (prefix ``NEXUS_``; NATS ``NEXUS_NATS_*``)."""

from __future__ import annotations

from nexus_events.runtime.lease import LeaseTtl
from nexus_events.runtime.settings import ConsumerPrefix, HealthPortSetting, ServiceSettings
from pydantic import Field


class LabSettings(ServiceSettings):
    health_port: HealthPortSetting = 8089
    consumer_prefix: ConsumerPrefix = "lab"

    projection_batch: int = Field(500, gt=0, description="Events per projection transaction.")
    query_timeout: float = Field(
        5.0, gt=0, le=60, description="Seconds to wait for core to answer a run or agent query."
    )
    # A case run whose ending core does not show yet, or core away, is looked at again this
    # often; so is an eval run asked right after its suite was applied.
    retry_interval: float = Field(
        1.0, gt=0, le=60, description="Seconds between retries of what waits on core."
    )
    # Several replicas: the lease holder projects and decides (requests case runs, grades);
    # all answer queries. Its own bucket: the lab never shares a lease.
    lab_lease_bucket: str = Field(
        "nexus_lab_lease",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the lease of the deciding replica.",
    )
    lease_ttl_seconds: LeaseTtl = 10.0
