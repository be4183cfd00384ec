"""``nexus.spend.v1.reserve.<run_id>`` and ``nexus.spend.v1.admit.<run_id>``: nats.micro
endpoints whose handler takes the run id from the subject's last token (a run's credential may
ask for its own run only) and hands it with the body to the reservations (slice A2)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from nexus_events.contract import subjects
from nexus_events.events.queries import Query
from nexus_events.events.spend import SpendAdmit, SpendReserve, SpendVerdict
from nexus_events.transport import micro
from nexus_events.transport.micro import Handler

Q = TypeVar("Q", bound=Query)


class Reserving(Protocol):
    """What the endpoints call (nexus_spend.reservations.Reservations)."""

    async def reserve(self, run_id: str, request: SpendReserve) -> SpendVerdict: ...

    async def admit(self, run_id: str) -> SpendVerdict: ...


def per_run(model: type[Q], fn: Callable[[str, Q], Awaitable[SpendVerdict]]) -> Handler:
    """A handler validating the body as `model` and the subject's last token as a run id."""
    return micro.per_run_handler(model, fn, service="spend")


def run_endpoints(reservations: Reserving) -> list[tuple[str, str, Handler]]:
    async def admit(run_id: str, _: SpendAdmit) -> SpendVerdict:
        return await reservations.admit(run_id)

    return [
        ("reserve", subjects.SPEND_RESERVE, per_run(SpendReserve, reservations.reserve)),
        ("admit", subjects.SPEND_ADMIT, per_run(SpendAdmit, admit)),
    ]


__all__ = ["Reserving", "per_run", "run_endpoints"]
