"""Split-brain safety of the scheduler lease on a real nats-server.

A leader that stalls (a rebuild longer than the lease TTL, a renewal that wrongly believes it
succeeded) must never act alongside the replica that took the lease over: no run is ever
started twice.
"""

from __future__ import annotations

import asyncio

import pytest
from nexus_events.bus import Bus
from nexus_scheduler.lease import LEADER_KEY
from nexus_scheduler.runtime.noop import NoopRuntime
from nexus_scheduler.service import SchedulerService

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
    await eventually(lambda: _true(not old.leading.is_set()), what="the old leader steps down")
