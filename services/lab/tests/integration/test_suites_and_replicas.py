"""Suite revisions (one per apply, a delete hiding the latest but not a pinned revision) and
two lab replicas: the lease holder alone decides, both answer queries, a clean stop of the
leader hands over and the eval runs go on with nothing requested twice."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.events.evals import EvalDeleted, EvalGetRequest
from nexus_events.transport.bus import Bus
from nexus_testing import eventually

from nexus_lab.app import LabApp

from .harness import (
    Script,
    ScriptedRunner,
    apply_agents,
    apply_suite,
    request_eval,
    stored_requests,
    wait_report,
)

Labs = Callable[[], Awaitable[LabApp]]
Runners = Callable[[Script], Awaitable[ScriptedRunner]]


def suite(cases: list[str]) -> dict[str, Any]:
    return {"id": "grow", "cases": [{"id": c, "input": f"do {c}"} for c in cases]}


async def test_suite_revisions_and_delete(
    bus: Bus, pg_pool: asyncpg.Pool[Any], core: CoreApp, labs: Labs, runner: Runners
) -> None:
    await apply_agents(bus, 1)
    await runner(lambda _: {"ok": True})
    await labs()
    await apply_suite(bus, suite(["a"]))
    await apply_suite(bus, suite(["a", "b"]))
    await request_eval(bus, "latest", suite="grow", agents=["implementer@1"])
    latest = await wait_report(bus, "latest", "completed")
    assert (latest.suite_revision, latest.planned) == (2, 2)
    await bus.publish(
        subjects.catalog_event(subjects.CatalogKind.EVAL, "grow", "deleted"), EvalDeleted()
    )
    await eventually(
        lambda: pg_pool.fetchval("SELECT deleted FROM lab.suites WHERE suite_id = 'grow'"),
        what="the delete folded",
    )
    await request_eval(bus, "after", suite="grow", agents=["implementer@1"])
    assert (await wait_report(bus, "after", "failed")).message == "no eval suite grow"
    # An eval run pinned to a revision still runs it after the delete.
    await request_eval(bus, "pinned", suite="grow", suite_revision=1, agents=["implementer@1"])
    pinned = await wait_report(bus, "pinned", "completed")
    assert (pinned.suite_revision, pinned.planned, pinned.graded) == (1, 1, 1)


async def test_one_replica_decides_and_a_clean_stop_hands_over(
    bus: Bus, core: CoreApp, labs: Labs, runner: Runners
) -> None:
    await apply_agents(bus, 1)
    await apply_suite(bus, suite(["a", "b", "c"]))
    await runner(lambda _: {"ok": True})
    first = await labs()
    second = await labs()
    assert first.leadership is not None
    assert second.leadership is not None
    assert (first.leadership.role, second.leadership.role) == ("leader", "standby")
    assert first.engine is not None
    assert (second.engine, second.runner, second.consumer) == (None, None, None)
    assert second.ready()
    await request_eval(bus, "one", suite="grow", agents=["implementer@1"], trials=2)
    await wait_report(bus, "one", "completed")
    assert second.engine is None  # it never decided
    # The standby answers queries from the same tables.
    assert second.queries is not None
    answered = await second.queries.get(EvalGetRequest(eval_run_id="one"))
    assert answered.graded == 6

    started = time.monotonic()
    await first.stop()
    await eventually(lambda: _role(second), lambda r: r == "leader", within=5)
    assert time.monotonic() - started < 5
    await request_eval(bus, "two", suite="grow", agents=["implementer@1"], trials=2)
    await wait_report(bus, "two", "completed")
    stored = await stored_requests(bus)
    assert len(stored) == 12
    assert set(stored.values()) == {1}


async def _role(app: LabApp) -> str | None:
    return None if app.leadership is None else app.leadership.role
