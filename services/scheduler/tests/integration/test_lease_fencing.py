"""Split-brain safety of the scheduler lease on a real nats-server.

A leader that stalls (a rebuild longer than the lease TTL, a renewal that wrongly believes it
succeeded) must never act alongside the replica that took the lease over: no run is ever
started twice.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import SCHEDULES
from nexus_events.events import ScheduleDefined
from nexus_events.runtime.clock import ManualClock
from nexus_events.runtime.lease import LEADER_KEY
from nexus_events.transport.bus import Bus
from nexus_scheduler.service import SchedulerService

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish_prepared, run_events

TTL = 1


async def _dispatched(bus: Bus) -> list[str]:
    return [rid for rid, _ in await run_events(bus, "dispatched")]


async def _true(value: bool) -> bool:
    return value


async def test_a_rebuild_slower_than_the_ttl_keeps_the_lease(
    make_app: AppFactory, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: nothing renewed the lease during the rebuild, the standby took it and started
    the runs, and the first leader then started them again."""
    ids = [f"slow-{i}" for i in range(8)]
    await publish_prepared(bus, [config(r) for r in ids])
    original = SchedulerService.recover
    rebuilding = asyncio.Event()
    calls = 0

    async def slow_recover(self: SchedulerService) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            rebuilding.set()
            await asyncio.sleep(3 * TTL)  # three TTLs of rebuild
        return await original(self)

    monkeypatch.setattr(SchedulerService, "recover", slow_recover)
    cluster = NoopRuntime()
    first = await make_app(cluster, wait_leading=False, lease_ttl_seconds=TTL)
    await asyncio.wait_for(rebuilding.wait(), 10)
    second = await make_app(
        cluster, wait_leading=False, lease_ttl_seconds=TTL, max_concurrent_runs=20
    )
    await eventually(lambda: _true(first.leading.is_set()), what="the first replica leads")
    await eventually(
        lambda: _true(sorted(set(cluster.start_calls)) == ids), what="every run started"
    )
    await asyncio.sleep(2 * TTL)  # give a second leader time to (wrongly) act
    assert sorted(cluster.start_calls) == ids
    assert sorted(await _dispatched(bus)) == ids
    assert not second.leading.is_set()
    assert second.service is None


async def test_a_leader_whose_lease_was_taken_does_not_act(
    make_app: AppFactory, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease moves to another replica while the old leader still believes it holds it
    (its renewals 'succeed'): the fence before each side effect stops the old leader."""
    cluster = NoopRuntime()
    old = await make_app(cluster, lease_ttl_seconds=TTL, max_concurrent_runs=20)
    assert old._lease is not None

    async def believes() -> bool:
        return True

    monkeypatch.setattr(old._lease, "renew", believes)
    new = await make_app(cluster, wait_leading=False, lease_ttl_seconds=TTL, max_concurrent_runs=20)
    kv = await bus.js.key_value(new.settings.lease_bucket)
    await kv.delete(LEADER_KEY)  # as if the old leader's key had expired during a pause
    await eventually(lambda: _true(new.leading.is_set()), what="the new replica leads")

    ids = [f"fenced-{i}" for i in range(6)]
    await publish_prepared(bus, [config(r) for r in ids])
    await eventually(
        lambda: _true(sorted(set(cluster.start_calls)) == ids), what="every run started"
    )
    await asyncio.sleep(2 * TTL)
    assert sorted(cluster.start_calls) == ids  # once each: the old leader never started one
    assert sorted(await _dispatched(bus)) == ids
    # The replicas share the durable consumer, and which one's pull request the server
    # serves first is timing: when the new leader fetched every `prepared`, the old one was
    # never asked to act, never met its fence, and stayed "leading" (the flake under load).
    # Ask it to act now: the fence must refuse, and that makes it step down.
    service = old.service
    if service is not None:  # None: it met the fence on a `prepared` already
        assert not await service.act()
    await eventually(lambda: _true(not old.leading.is_set()), what="the old leader steps down")
    assert sorted(cluster.start_calls) == ids


async def test_a_leader_that_lost_the_lease_fires_no_schedule(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    """A fire is a side effect: a tick in flight when the lease moved publishes nothing, and
    the replica that leads next fires the same schedule."""
    app = await make_app(schedule_jitter_cap_seconds=0, lease_ttl_seconds=30)
    at = clock.now() + timedelta(minutes=5)
    await bus.publish(
        subjects.schedule_event("once", "defined"), ScheduleDefined(agent_id="a", at=at)
    )
    schedules = app.schedules
    assert schedules is not None
    assert app._lease is not None
    lease = app._lease

    async def seen() -> bool:
        return "once" in schedules.schedules

    await eventually(seen, what="schedule followed")
    kv = await bus.js.key_value(app.settings.lease_bucket)
    await kv.put(LEADER_KEY, b"another-replica")  # taken over while this one was paused

    async def lost() -> bool:
        return not await lease.still_held()

    await eventually(lost, what="the lease watch saw the new holder")
    clock.set(at)
    assert await schedules.tick() == []  # the tick that was already under way
    assert await run_events(bus, "requested") == []
    assert [d async for d in bus.replay(SCHEDULES)][-1].address.event == "defined"

    # The key frees up (the other replica stopped): this replica leads again and fires.
    await kv.delete(LEADER_KEY)
    await eventually(lambda: _true(app.schedules is not schedules), what="a new term")
    await eventually(lambda: _true(app.leading.is_set()), what="leading again")

    async def fired_once() -> bool:  # by the new term's first tick
        return [r for r, _ in await run_events(bus, "requested")] == [
            f"sched-once-{at:%Y%m%dT%H%M%S}"
        ]

    await eventually(fired_once, what="the new term fires the schedule")
