"""Two spend replicas: the lease holder alone projects, both answer queries and the per-run
endpoints (the run id from the subject), and a clean stop of the leader hands over with the
projection going on from its checkpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from nexus_events.contract import subjects
from nexus_events.events import RunTurn
from nexus_events.transport.bus import Bus
from nexus_testing import eventually, micro_stats

from nexus_spend.app import SpendApp
from nexus_spend.config import SpendSettings

from .usage_harness import Run, ask, publish, publish_run

Apps = Callable[[], Awaitable[SpendApp]]


@pytest.fixture
async def apps(bus: Bus, pg_pool: asyncpg.Pool[Any]) -> AsyncIterator[Apps]:
    started: list[SpendApp] = []

    async def make() -> SpendApp:
        app = SpendApp(SpendSettings(health_port=None, fetch_timeout=0.2), bus=bus, pool=pg_pool)
        await app.start()
        started.append(app)
        return app

    yield make
    for app in started:
        await app.stop()


async def usage_of(bus: Bus, run_id: str) -> dict[str, Any] | None:
    rows = (await ask(bus, subjects.SPEND_USAGE, {"by": "run"})).data["rows"]
    return next((r for r in rows if r["key"] == run_id), None)


async def test_the_leader_projects_both_answer_and_a_clean_stop_hands_over(
    bus: Bus, apps: Apps
) -> None:
    first = await apps()
    second = await apps()
    assert first.leadership is not None
    assert second.leadership is not None
    assert (first.leadership.role, second.leadership.role) == ("leader", "standby")
    assert first.runner is not None
    assert second.runner is None
    assert first.ready()
    assert second.ready()
    await publish_run(bus, Run("a1", turns=[(1, 10, 1, 0.5)], ends=False))
    line = await eventually(
        lambda: usage_of(bus, "a1"),
        until=lambda r: r is not None and r["turns"] > 0,
        what="a1 projected",
    )
    assert (line["turns"], line["cost_usd"]) == (1, 0.5)
    stats = await micro_stats(bus, "nexus-spend", 2)
    assert len({s["id"] for s in stats}) == 2  # both replicas serve

    # A run id that is not a token is refused in one line; a real one is answered.
    bad = await ask(bus, "nexus.spend.v1.admit.a$b", {})
    assert bad.error_code == "400", bad
    reserve = await ask(
        bus, subjects.spend_reserve("a1"), {"turn": 2, "cost_usd": 0.1, "tokens": 100}
    )
    assert reserve.error_code is None, reserve.message
    assert reserve.data["decision"] == "granted"

    await first.stop()
    await eventually(
        lambda: second.leadership is not None and second.leadership.role == "leader",
        what="the standby leads",
    )
    await publish(bus, "a1", RunTurn(turn=2, tokens_in=10, cost_usd=0.25))
    line = await eventually(
        lambda: usage_of(bus, "a1"), until=lambda r: r["turns"] == 2, what="turn 2 projected"
    )
    assert line["cost_usd"] == 0.75
