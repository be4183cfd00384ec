"""Acceptance of chat conversations (issue 42) through the services that carry them: the gateway
as a real process (killed with SIGKILL between messages), core assembling each run (its
conversation into the run's config), the real runner (`execute_run`) and the dev stack's
offline model, whose `echo` script answers with every user message it was sent. A three-message
Slack thread gets three answers, each carrying the messages before it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from nats.aio.msg import Msg
from nexus_cli.devstack.offline_model import ECHO_PREFIX
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.contract import codec, subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import RunPrepared
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.catalog_commands import apply_agent
from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack
from tests.support.gateway import channel_events, pair
from tests.support.offline_model import offline_model

from .test_kill import T1, GatewayProcess, _posted, _said, gateway_process  # noqa: F401

AGENT_YAML = """
id: helper
role: custom
model: {name: nexus-offline}
system_prompt: "You help people in chat. [offline-model:echo]"
tools: [finish]
"""


class OfflineRunners:
    """Runs every prepared run with the real runner in this process, against the offline
    model (the scheduler's part, starting a runner per prepared config, is not under test)."""

    def __init__(self, bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
        self.bus = bus
        self.runner_bus = runner_bus
        self.settings = settings
        self.configs: dict[str, Any] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._sub: Any = None

    async def __aenter__(self) -> OfflineRunners:
        self._sub = await self.bus.nc.subscribe(
            subjects.run_events_filter(None, RunEvent.PREPARED), cb=self._on
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._sub.unsubscribe()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _on(self, msg: Msg) -> None:
        d = codec.decode(msg.subject, msg.data, msg.headers)
        if not isinstance(d.event, RunPrepared) or d.event.config.run_id in self.configs:
            return
        config = d.event.config
        self.configs[config.run_id] = config
        task = asyncio.create_task(execute_run(config, self.settings, self.runner_bus))
        self._tasks.add(task)


@pytest.fixture
async def core(bus: Bus, pg_pool: asyncpg.Pool[Any]) -> AsyncIterator[CoreApp]:
    app = CoreApp(
        CoreSettings(health_port=0, memory_timeout=0.2, fetch_timeout=0.2), bus=bus, pool=pg_pool
    )
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


@pytest.fixture
async def runners(bus: Bus, nats_url: str, tmp_path: Path) -> AsyncIterator[OfflineRunners]:
    runner_bus = await Bus.connect(BusSettings(url=nats_url, name="runner"), source="runner")
    async with offline_model() as base_url:
        settings = RunnerSettings(
            workspace_root=tmp_path / "runs",
            llm_base_url=base_url,
            heartbeat_interval=0.5,
            budget_reservations="off",  # no spend service here
            tool_sandbox="off",  # no tool but finish
        )
        try:
            async with OfflineRunners(bus, runner_bus, settings) as r:
                yield r
        finally:
            await runner_bus.close()


async def test_a_three_message_thread_is_answered_in_context_by_the_offline_model(
    bus: Bus,
    core: CoreApp,
    runners: OfflineRunners,
    gateway_process: GatewayProcess,  # noqa: F811
    slack: FakeSlack,
) -> None:
    await apply_agent(bus, AGENT_YAML)
    await eventually(core.catalog_fresh, what="catalog applied")
    await pair(bus, "slack", "U1")
    gateway_process.start()
    await gateway_process.ready()
    url = f"http://127.0.0.1:{gateway_process.port}/slack/events"

    await _said(url, "run helper: my name is Ana", T1, "E1")
    first = f"{ECHO_PREFIX} (1): my name is Ana"
    await eventually(lambda: _posted(slack, first), within=60, what="the 1st answer")
    await _said(url, "what is my name?", "1700002001.000100", "E2", thread=T1)
    second = f"{ECHO_PREFIX} (2): my name is Ana | what is my name?"
    await eventually(lambda: _posted(slack, second), within=60, what="the 2nd answer")

    gateway_process.kill()
    gateway_process.start()
    await gateway_process.ready()
    await _said(url, "and who asked?", "1700002002.000100", "E3", thread=T1)
    third = f"{ECHO_PREFIX} (3): my name is Ana | what is my name? | and who asked?"
    await eventually(lambda: _posted(slack, third), within=60, what="the 3rd answer")

    # The third run's config carried the conversation: both earlier messages and both
    # answers, in order, as core assembled it from the gateway's request.
    [last] = [c for c in runners.configs.values() if c.input == "and who asked?"]
    assert last.agent_id == "helper"
    assert [(m.role, m.text.split(":")[0]) for m in last.conversation] == [
        ("user", "my name is Ana"),
        ("assistant", ECHO_PREFIX + " (1)"),
        ("user", "what is my name?"),
        ("assistant", ECHO_PREFIX + " (2)"),
    ]
    texts = [p.text for p in slack.posts if p.thread_ts == T1]
    assert len(texts) == len(set(texts))  # nothing posted twice across the kill
    turns = await channel_events(bus, "conversation_turn")
    assert len({d.event.run_id for d in turns}) == 3  # type: ignore[attr-defined]
