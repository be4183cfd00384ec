"""A scheduler's stop is bounded by its drain timeout, and says when it gave up waiting."""

from __future__ import annotations

import asyncio
import logging

import nats.js.errors
import pytest
from nexus_events.events import RunConfig
from nexus_events.runtime.lease import LEADER_KEY
from nexus_events.transport.bus import Bus
from nexus_scheduler.runtime.base import RunHandle

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish_prepared


class HangingRuntime(NoopRuntime):
    """A runtime whose starts never return (an API server that stopped answering)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled_starts = 0

    async def start_run(self, config: RunConfig) -> RunHandle:
        self.start_calls.append(config.run_id)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled_starts += 1
            raise
        raise AssertionError("unreachable")


async def _started(runtime: NoopRuntime, n: int) -> bool:
    return len(runtime.start_calls) == n


async def test_stop_gives_up_after_the_drain_timeout_and_says_so(
    make_app: AppFactory, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: stop() waited for the hanging start forever."""
    runtime = HangingRuntime()
    app = await make_app(runtime, drain_timeout_seconds=0.5)
    await publish_prepared(bus, [config("hangs-1"), config("hangs-2")])
    await eventually(lambda: _started(runtime, 2), what="both starts under way")

    caplog.set_level(logging.WARNING, logger="nexus_scheduler.app")
    own_bus = app.bus
    await asyncio.wait_for(app.stop(), timeout=15)

    [record] = [r for r in caplog.records if "drain did not finish" in r.getMessage()]
    assert record.getMessage() == "drain did not finish within 0.5s; stopping anyway"
    assert record.__dict__["starts_abandoned"] == 2
    assert runtime.cancelled_starts == 2
    # The lease is still handed over at once, so a standby need not wait for the TTL.
    kv = await bus.js.key_value(app.settings.lease_bucket)
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get(LEADER_KEY)
    assert own_bus.nc.is_closed


async def test_a_drain_within_the_timeout_waits_for_the_starts(
    make_app: AppFactory, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, drain_timeout_seconds=30)
    await publish_prepared(bus, [config("quick-1")])
    await eventually(lambda: _started(runtime, 1), what="the start")
    caplog.set_level(logging.WARNING, logger="nexus_scheduler.app")
    await app.stop()
    assert not [r for r in caplog.records if "drain did not finish" in r.getMessage()]
    assert runtime.started == ["quick-1"]
