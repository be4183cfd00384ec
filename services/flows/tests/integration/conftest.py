from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from nexus_events.events.flows import FlowDefinition
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus

from nexus_flows.app import FlowsApp

from .harness import Catalog, FakeRunner, Script, start_app


@dataclass
class Env:
    bus: Bus
    pool: asyncpg.Pool[Any]
    catalog: Catalog
    runner: FakeRunner
    app: FlowsApp
    # The flows engine's clock: due waits and gate expiries fire when a test moves it.
    clock: ManualClock

    async def restart(self) -> None:
        await self.app.stop()
        self.app = await start_app(self.bus, self.pool, self.clock)


EnvFactory = Callable[[list[FlowDefinition], Script], Awaitable[Env]]


@pytest.fixture
async def make_env(bus: Bus, pg_pool: asyncpg.Pool[Any]) -> AsyncIterator[EnvFactory]:
    async with AsyncExitStack() as stack:
        envs: list[Env] = []

        async def make(flows: list[FlowDefinition], script: Script) -> Env:
            catalog = Catalog(bus, flows)
            await catalog.start()
            stack.push_async_callback(catalog.stop)
            runner = FakeRunner(bus, script)
            await runner.start()
            stack.push_async_callback(runner.stop)
            clock = ManualClock()
            app = await start_app(bus, pg_pool, clock)
            env = Env(bus, pg_pool, catalog, runner, app, clock)
            envs.append(env)
            return env

        async def stop_apps() -> None:
            for env in envs:
                await env.app.stop()

        stack.push_async_callback(stop_apps)
        yield make
