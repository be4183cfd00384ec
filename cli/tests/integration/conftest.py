"""One real dev stack (`nexus dev up` as a process) shared by the CLI's integration tests.

The runner is the stand-in `fake_runner.py` (configured through the scheduler's own
NEXUS_LOCAL_COMMAND). Teardown runs `nexus dev down` and fails the run if any
process the stack started is still alive (`tests.support.devstack`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.transport.bus import Bus
from tests.support import devstack
from tests.support.cli import invoke
from tests.support.devstack import Result

FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")


class Stack(devstack.Stack):
    def nexus(self, *args: str) -> Result:  # type: ignore[override]
        """Run the CLI in this process (typer's CliRunner) with the stack's environment."""
        result = invoke(self.env, *args)
        return Result(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    runner = json.dumps([sys.executable, str(FAKE_RUNNER)])
    env = devstack.stack_env(tmp, {"NEXUS_LOCAL_COMMAND": runner})
    yield from devstack.running(Stack(tmp / ".nexus", tmp, env))


@pytest.fixture
async def core(bus: Bus, pg_pool: asyncpg.Pool[Any]) -> AsyncIterator[CoreApp]:
    """A core on the test's NATS and database (no memory, no health port)."""
    settings = CoreSettings(health_port=None, memory_enabled=False, fetch_timeout=0.2)
    core = CoreApp(settings, bus=bus, pool=pg_pool)
    await core.start()
    try:
        yield core
    finally:
        await core.stop()
