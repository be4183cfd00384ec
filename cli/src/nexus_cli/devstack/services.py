"""The services of the dev stack, by name: what the supervisor starts and `nexus dev status`
and `nexus dev logs` list (one place, so a new service cannot be left out of either)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Not Nexus services: started by the supervisor before them (nats, postgres) or with
# `up --offline-model` after them (model).
INFRA_SERVICES = ("nats", "postgres")
OFFLINE_MODEL = "model"


@dataclass(frozen=True)
class AppService:
    """One Nexus service of the dev stack: ``python -m <module>`` with a health endpoint."""

    name: str
    module: str
    # The service's Settings read its health endpoint from these (core and memory share the
    # plain names; the scheduler's are prefixed).
    health_host_env: str = "NEXUS_HEALTH_HOST"
    health_port_env: str = "NEXUS_HEALTH_PORT"
    needs_database: bool = True
    env: dict[str, str] = field(default_factory=dict)
    # Started only when one of these is set in the stack's environment (empty: always).
    only_with: tuple[str, ...] = ()
    # Counted in the stack's readiness; a service that waits on something outside the stack
    # (Plane, Slack) is not, so its absence never fails `nexus dev up`.
    gates_readiness: bool = True

    def enabled(self, env: dict[str, str]) -> bool:
        return not self.only_with or any(env.get(name) for name in self.only_with)


# Started in this order, stopped in the reverse one: memory before the scheduler so a run's
# assembly finds it, the scheduler last so nothing dispatches before its readers are up.
APP_SERVICES: tuple[AppService, ...] = (
    AppService("core", "nexus_core"),
    AppService("memory", "nexus_memory"),
    AppService(
        "scheduler",
        "nexus_scheduler",
        health_host_env="NEXUS_SCHEDULER_HEALTH_HOST",
        health_port_env="NEXUS_SCHEDULER_HEALTH_PORT",
        needs_database=False,
    ),
    # plane-sync: only when Plane is configured (NEXUS_PLANE_URL and its other NEXUS_PLANE_*
    # settings; docs/plane.md); it queues until Plane answers.
    AppService(
        "plane-sync", "nexus_plane_sync", only_with=("NEXUS_PLANE_URL",), gates_readiness=False
    ),
    # The channel gateway: only when a channel is configured (docs/channels.md); without one
    # it would only answer 404s.
    AppService(
        "channel-gateway",
        "nexus_channel_gateway",
        only_with=(
            "NEXUS_SLACK_BOT_TOKEN",
            "NEXUS_TELEGRAM_BOT_TOKEN",
            "NEXUS_WEBHOOK_SOURCES_FILE",
        ),
        gates_readiness=False,
    ),
)
GATEWAY = next(app for app in APP_SERVICES if app.name == "channel-gateway")


def stack_services() -> tuple[str, ...]:
    """Every service the supervisor may run: the infrastructure, the Nexus services in their
    start order, then the offline model (listed last, as `dev status` always showed it)."""
    return (*INFRA_SERVICES, *(app.name for app in APP_SERVICES), OFFLINE_MODEL)


def always_started() -> tuple[str, ...]:
    """The services every stack runs (the others depend on its environment or options)."""
    return (*INFRA_SERVICES, *(app.name for app in APP_SERVICES if not app.only_with))
