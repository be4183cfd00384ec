"""Core's run assembly asks the real memory service: a run's `prepared` carries what memory
knows of its agent, task, repository and the global scope, and nothing of other agents."""

from __future__ import annotations

from typing import Any

import asyncpg
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunPrepared, RunRequested
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_testing import eventually

from nexus_memory.app import MemoryApp
from services.memory.tests.support import applied, record

AGENT = """\
id: implementer
role: implementer
system_prompt: You fix bugs.
model: {name: offline}
"""


async def prepared(bus: Bus, run_id: str) -> RunPrepared | None:
    async for d in bus.replay(RUNS, run_id=run_id):
        if isinstance(d.event, RunPrepared):
            return d.event
    return None


async def test_a_runs_prepared_event_carries_relevant_memory(
    memory: MemoryApp, bus: Bus, pg_dsn: str
) -> None:
    mine = await record(bus, "The login tests need the FAKE_SSO=1 variable", "agent:implementer")
    task = await record(bus, "Ticket T-9 reproduces only on the login page", "task:T-9")
    glob = await record(bus, "Every login change needs a security review", "global")
    other = await record(bus, "The login page is owned by the web team", "agent:reviewer")
    await applied(memory)
    pool: asyncpg.Pool[Any] = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=6)
    core = CoreApp(
        CoreSettings(health_port=None, memory_timeout=2.0, fetch_timeout=0.2),
        bus=bus, pool=pool,
    )  # fmt: skip
    await core.start()
    try:
        await apply_agent(bus, AGENT)
        await eventually(core.catalog_fresh, what="catalog applied")
        await bus.publish(
            subjects.run_event("run-mem-1", "requested"),
            RunRequested(agent_id="implementer", task_id="T-9", input="fix the login bug"),
        )
        event = await eventually(lambda: prepared(bus, "run-mem-1"), what="prepared")
    finally:
        await core.stop()
        await pool.close()
    context = event.config.memory
    assert context.status == "ok"
    ids = [i.memory_id for i in context.items]
    assert set(ids) == {mine, task, glob}
    assert other not in ids
    assert all(i.why is not None and i.scope for i in context.items)
