from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import Event, RunConfig
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus, BusSettings, Outgoing
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings
from nexus_scheduler.runtime.base import AgentRuntime

from tests.support.noop_runtime import NoopRuntime

from ..factories import prepared
from ..waiting import eventually

AppFactory = Callable[..., Awaitable[SchedulerApp]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def make_app(nats_url: str, clock: ManualClock) -> AsyncIterator[AppFactory]:
    """Start scheduler apps on the test's NATS; ticks are manual (tick_seconds is huge)."""
    apps: list[SchedulerApp] = []

    async def make(
        runtime: AgentRuntime | None = None, *, wait_leading: bool = True, **overrides: Any
    ) -> SchedulerApp:
        values: dict[str, Any] = {
            "replica_id": f"replica-{uuid.uuid4().hex[:6]}",
            "tick_seconds": 3600,
            "lease_ttl_seconds": 3,
            "cancel_grace_seconds": 30,
            "heartbeat_timeout_seconds": 90,
            "exit_grace_seconds": 5,
            "health_port": None,  # the health tests turn it on
        }
        values.update(overrides)
        app = SchedulerApp(
            SchedulerSettings(**values),
            bus_settings=BusSettings(url=nats_url, name="scheduler-test"),
            runtime=runtime or NoopRuntime(),
            clock=clock,
        )
        await app.start()
        apps.append(app)
        if wait_leading:
            await eventually(lambda: _true(app.leading.is_set()), what="leadership")
        return app

    yield make
    for app in reversed(apps):
        if app._bus is not None and not app._bus.nc.is_closed:
            await app.stop()


async def _true(value: bool) -> bool:
    return value


async def publish_prepared(bus: Bus, configs: list[RunConfig]) -> None:
    from nexus_events.events import RunPrepared

    await bus.publish_many(
        [Outgoing(subjects.run_event(c.run_id, "prepared"), RunPrepared(config=c)) for c in configs]
    )


async def publish(bus: Bus, run_id: str, event: Event) -> None:
    await bus.publish(subjects.run_event(run_id, event.event_name), event)


async def run_events(bus: Bus, event: str | None = None) -> list[tuple[str, Event]]:
    """(run_id, event) of NEXUS_RUNS in stream order, optionally one event name."""
    out = []
    async for d in bus.replay(RUNS, filter_subject=subjects.run_events_filter(event=event)):
        assert d.address.run_id is not None
        out.append((d.address.run_id, d.event))
    return out


async def events_by_run(bus: Bus) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for run_id, ev in await run_events(bus):
        out[run_id].append(ev.event_name)
    return out


__all__ = ["eventually", "prepared", "publish", "publish_prepared", "run_events"]
