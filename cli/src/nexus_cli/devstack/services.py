"""The services of the dev stack, by name: what the supervisor starts and `nexus dev status`
and `nexus dev logs` list (one place, so a new service cannot be left out of either)."""

from __future__ import annotations

from dataclasses import dataclass, field

from nexus_events.runtime.services import LONG_RUNNING, ServiceSpec

# Not Nexus services: started by the supervisor before them (nats, postgres) or with
# `up --offline-model` after them (model).
INFRA_SERVICES = ("nats", "postgres")
OFFLINE_MODEL = "model"


@dataclass(frozen=True)
class AppService:
    """One Nexus service of the dev stack: ``python -m <module>`` with a health endpoint."""

    name: str
    module: str
    # The NATS user it connects as (the service table's; nexus_events.runtime.nats_config's users).
    nats_user: str
    # The service's Settings read its health endpoint from these (one NEXUS_ prefix for all).
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


# Started by every dev stack whatever the table's profile says: delegation between agents
# (agent.route.v1) runs in the gateway; its chat/webhook ingress matters only with a channel.
ALWAYS_IN_DEV = frozenset({"channel-gateway"})


def _app(spec: ServiceSpec) -> AppService:
    return AppService(
        spec.name,
        spec.module,
        spec.nats_user,
        needs_database=spec.database,
        only_with=spec.profile.enabled_by
        if spec.profile and spec.name not in ALWAYS_IN_DEV
        else (),
        # An optional service waits on something outside the stack (Plane, Slack): its
        # absence never fails `nexus dev up`.
        gates_readiness=spec.profile is None,
    )


# The long-running services of the service table (nexus_events.runtime.services), in its order:
# started in it, stopped in the reverse one.
APP_SERVICES: tuple[AppService, ...] = tuple(_app(spec) for spec in LONG_RUNNING)
GATEWAY = next(app for app in APP_SERVICES if app.name == "channel-gateway")


def stack_services() -> tuple[str, ...]:
    """Every service the supervisor may run: the infrastructure, the Nexus services in their
    start order, then the offline model (listed last, as `dev status` always showed it)."""
    return (*INFRA_SERVICES, *(app.name for app in APP_SERVICES), OFFLINE_MODEL)


def always_started() -> tuple[str, ...]:
    """The services every stack runs (the others depend on its environment or options)."""
    return (*INFRA_SERVICES, *(app.name for app in APP_SERVICES if not app.only_with))
