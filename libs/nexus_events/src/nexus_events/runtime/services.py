"""The Nexus services as deployed: one table the deploy files, the dev stack and docs follow.

Each `ServiceSpec` says what a service is to the rest of the system: its process
(``python -m <module>``), its package, its NATS user, its ports and probes, the compose
profile it is optional under and how `nexus dev` starts it. Adding a service starts here
(docs/deploy.md, "Adding a service").

Generated from the table: the service sections of the compose files, the Kubernetes base, its
Secrets, the `dev-stack` extra and docs/deploy.md's services table, with each service's
fragments in services/<name>/deploy/ (scripts/render_services.py); the NATS users of
deploy/nats/nats.conf (deploy/nats/render.py), the dev supervisor's service list
(`nexus_cli.devstack.supervisor.APP_SERVICES`), the services' tags in docs/asyncapi.json and
the per-service sections of the configuration reference (scripts/config_reference.py).
Checked against it by tests/deploy/test_service_table.py: deploy/compose.yaml,
deploy/k8s/base, the parties of `nexus_events.contract.roles`, and the `dev-stack` extra of
nexus-cli.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# The probe paths every service's health endpoint serves (`nexus_events.runtime.health`): liveness
# (the process answers) and readiness (its connections are up and it can do its work).
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"


class Kind(StrEnum):
    """How a service runs."""

    # Long-running: a compose service and a Kubernetes Deployment with a health port.
    SERVICE = "service"
    # Started by the scheduler once per run (a Job, a local process): no Deployment, no port.
    PER_RUN = "per_run"


@dataclass(frozen=True, slots=True)
class Profile:
    """An optional part of the stack: a compose profile of that name, and in `nexus dev` a
    service started only when one of `enabled_by` is set in the stack's environment."""

    name: str
    enabled_by: tuple[str, ...]


# Plane's mirror: only where Plane is configured (docs/plane.md).
PLANE = Profile("plane", ("NEXUS_PLANE_URL",))
# Chat and webhooks: only where a channel is configured (docs/channels.md); without one the
# gateway would only answer 404s.
CHANNELS = Profile(
    "channels", ("NEXUS_SLACK_BOT_TOKEN", "NEXUS_TELEGRAM_BOT_TOKEN", "NEXUS_WEBHOOK_SOURCES_FILE")
)


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """One Nexus service. `name` is also its compose service and Kubernetes Deployment name,
    its `nexus_events.contract.roles.Service` value, its dead-letter token and its NATS user."""

    name: str
    module: str  # run as `python -m <module>`
    package: str  # its distribution (services/<dir>/pyproject.toml)
    summary: str  # one line: the AsyncAPI tag, docs
    # Its pydantic-settings classes as "module:Class", the service's own first.
    settings: tuple[str, ...]
    kind: Kind = Kind.SERVICE
    health_port: int | None = None  # LIVENESS_PATH and READINESS_PATH (compose and k8s)
    # The port callers outside Nexus reach (webhooks, chat): published by compose, opened by
    # a NetworkPolicy in Kubernetes.
    ingress_port: int | None = None
    ingress_name: str = "http"  # its Kubernetes port name (an Ingress may refer to it)
    database: bool = False  # has a schema in PostgreSQL (NEXUS_DATABASE_URL)
    profile: Profile | None = None  # optional (compose profile; `nexus dev` on demand)
    # Services it runs as child processes, which inherit its environment (the local runtime).
    spawns: tuple[str, ...] = ()

    @property
    def nats_user(self) -> str:
        """Its NATS user (deploy/nats): one per service, named as the service."""
        return self.name

    @property
    def ports(self) -> dict[str, int]:
        """Its container ports by their Kubernetes port name."""
        named = {"health": self.health_port, self.ingress_name: self.ingress_port}
        return {name: port for name, port in named.items() if port is not None}


# In start order: `nexus dev` starts the long-running ones in this order and stops them in the
# reverse one (memory before the scheduler so a run's assembly finds it, the scheduler after
# core so nothing dispatches before its readers are up; the optional ones last).
SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec(
        "core",
        "nexus_core",
        "nexus-core",
        "Catalog, run assembly, projections (agent_runs, board), queries.",
        ("nexus_core.config:CoreSettings", "nexus_core.run_metrics:RunMetricsSettings"),
        health_port=8080,
        database=True,
    ),
    ServiceSpec(
        "memory",
        "nexus_memory",
        "nexus-memory",
        "Long-term memory: hybrid search, extraction, consolidation, secret guard.",
        ("nexus_memory.config:MemorySettings",),
        health_port=8083,
        database=True,
    ),
    ServiceSpec(
        "scheduler",
        "nexus_scheduler",
        "nexus-scheduler",
        "Admission, dispatch, cancellation, timeouts, cron schedules.",
        ("nexus_scheduler.config:SchedulerSettings",),
        health_port=8081,
        spawns=("runner",),
    ),
    ServiceSpec(
        "flows",
        "nexus_flows",
        "nexus-flows",
        "Flows: carries a task through planner, implementer, reviewer, tester (run, map, gate,"
        " wait steps).",
        ("nexus_flows.config:FlowsSettings",),
        health_port=8086,
        database=True,
    ),
    ServiceSpec(
        "runner",
        "nexus_runner",
        "nexus-runner",
        "The in-pod agent loop of one run.",
        ("nexus_runner.config:RunnerSettings",),
        kind=Kind.PER_RUN,
    ),
    ServiceSpec(
        "plane-sync",
        "nexus_plane_sync",
        "nexus-plane-sync",
        "Tasks and runs <-> Plane work items, comments, agent runs; webhooks in.",
        ("nexus_plane_sync.config:PlaneSyncSettings",),
        health_port=8084,
        ingress_port=8090,
        ingress_name="webhooks",
        database=True,
        profile=PLANE,
    ),
    ServiceSpec(
        "channel-gateway",
        "nexus_channel_gateway",
        "nexus-channel-gateway",
        "Slack, Telegram, webhooks in; replies, approvals relay, pairing.",
        ("nexus_channel_gateway.config:GatewaySettings",),
        health_port=8085,
        ingress_port=8090,
        database=True,
        profile=CHANNELS,
    ),
    ServiceSpec(
        "console",
        "nexus_console",
        "nexus-console",
        "The web console: runs, flows, approvals, dead letters, schedules, usage, live.",
        ("nexus_console.config:ConsoleSettings",),
        health_port=8087,
        ingress_port=8088,
    ),
    ServiceSpec(
        "lab",
        "nexus_lab",
        "nexus-lab",
        "The lab: eval runs of suites over agent revisions, graded, with their reports.",
        ("nexus_lab.config:LabSettings",),
        health_port=8089,
        database=True,
    ),
    ServiceSpec(
        "spend",
        "nexus_spend",
        "nexus-spend",
        "Spend: usage rolled up, budgets reserved against before each model call, and asks.",
        ("nexus_spend.config:SpendSettings",),
        health_port=8092,
        database=True,
    ),
)

BY_NAME: dict[str, ServiceSpec] = {s.name: s for s in SERVICES}
# The long-running ones: compose services, Kubernetes Deployments, `nexus dev` children.
LONG_RUNNING: tuple[ServiceSpec, ...] = tuple(s for s in SERVICES if s.kind is Kind.SERVICE)


def service(name: str) -> ServiceSpec:
    """The entry of one service; `KeyError` naming the known ones if there is none."""
    try:
        return BY_NAME[name]
    except KeyError:
        known = ", ".join(BY_NAME)
        raise KeyError(f"no service {name!r} in nexus_events.runtime.services ({known})") from None
