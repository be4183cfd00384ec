"""Core hosts the system's run metrics: they follow NEXUS_RUNS while core runs."""

from __future__ import annotations

from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunCompleted, RunRequested, RunStarted
from nexus_events.transport.bus import Bus

from nexus_core.app import CoreApp
from nexus_core.run_metrics import RunMetricsSettings

from .conftest import core_settings
from .support import eventually


async def test_core_follows_the_run_stream_for_metrics(bus: Bus, core_pool: asyncpg.Pool[Any]):
    app = CoreApp(
        core_settings(),
        bus=bus,
        pool=core_pool,
        metrics_settings=RunMetricsSettings(durable="core_metrics", poll_interval=0.2),
    )
    await app.start()
    try:
        run = "metrics-run"
        await bus.publish(subjects.run_event(run, "requested"), RunRequested(agent_id="nobody"))
        await bus.publish(subjects.run_event(run, "started"), RunStarted())
        last = await bus.publish(subjects.run_event(run, "completed"), RunCompleted())

        async def caught_up() -> bool:
            info = await bus.js.consumer_info(RUNS, "core_metrics")
            return info.delivered.stream_seq >= last.seq and info.num_ack_pending == 0

        await eventually(caught_up, within=10)
        assert app.metrics is not None
    finally:
        await app.stop()
    assert app.metrics is None  # stopped and released with core
    disabled = CoreApp(
        core_settings(), bus=bus, pool=core_pool, metrics_settings=RunMetricsSettings(enabled=False)
    )
    await disabled.start()
    try:
        assert disabled.metrics is None
    finally:
        await disabled.stop()
