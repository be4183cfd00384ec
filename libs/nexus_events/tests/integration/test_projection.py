"""The projection helper against a real nats-server and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ, RUNS
from nexus_events.events import DeadLetter, RunHeartbeat, RunTurn
from nexus_events.transport import projection as projection_module
from nexus_events.transport.bus import Bus, Outgoing
from nexus_events.transport.projection import ProjectionRunner, Source, projection_status, rebuild
from nexus_testing import eventually

from .counting_projection import CountingProjection

ROOT = Path(__file__).resolve().parents[4]


async def publish_events(bus: Bus, n: int, runs: int = 7, start: int = 0) -> int:
    """Publish `n` run events spread over `runs` runs; return the last stream sequence."""
    items = []
    for i in range(start, start + n):
        run = f"run-{i % runs}"
        if i % 3:
            items.append(Outgoing(subjects.run_event(run, "heartbeat"), RunHeartbeat(seq=i)))
        else:
            items.append(Outgoing(subjects.run_event(run, "turn"), RunTurn(turn=i + 1)))
    acks = await bus.publish_many(items)
    return acks[-1].seq


async def rows(pool: asyncpg.Pool[Any], schema: str) -> list[tuple[str, str, int]]:
    records = await pool.fetch(f'SELECT run_id, event, n FROM "{schema}".counts ORDER BY 1, 2')
    return [(r["run_id"], r["event"], r["n"]) for r in records]


async def checkpoint(pool: asyncpg.Pool[Any], schema: str) -> int:
    value = await pool.fetchval(
        f'SELECT last_seq FROM "{schema}".projection_checkpoint WHERE stream = $1', RUNS
    )
    return int(value or 0)


async def test_applies_every_event_once_and_checkpoints(bus: Bus, pg_pool: asyncpg.Pool[Any]):
    last = await publish_events(bus, 1200)
    async with ProjectionRunner(bus, pg_pool, CountingProjection(), batch=100) as runner:
        await runner.wait_until(RUNS, last)
    assert await checkpoint(pg_pool, "counting") == last
    assert sum(n for _, _, n in await rows(pg_pool, "counting")) == 1200
    assert await pg_pool.fetchval('SELECT count(*) FROM "counting".seen') == 1200


async def test_resumes_after_checkpoint_without_double_counting(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
):
    last = await publish_events(bus, 300)
    async with ProjectionRunner(bus, pg_pool, CountingProjection()) as runner:
        await runner.wait_until(RUNS, last)
    last = await publish_events(bus, 200, start=300)
    async with ProjectionRunner(bus, pg_pool, CountingProjection()) as runner:
        await runner.wait_until(RUNS, last)
        assert runner.applied == 200
    assert sum(n for _, _, n in await rows(pg_pool, "counting")) == 500


async def test_killed_mid_stream_ends_with_rows_of_an_uninterrupted_run(
    bus: Bus, pg_pool: asyncpg.Pool[Any], pg_dsn: str, nats_url: str
):
    last = await publish_events(bus, 6000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "libs.nexus_events.tests.integration.counting_projection",
        nats_url,
        pg_dsn,
    ]

    async def cp_at_least(n: int) -> bool:
        try:
            return await checkpoint(pg_pool, "counting") >= n
        except asyncpg.exceptions.UndefinedTableError:
            return False

    proc = await asyncio.create_subprocess_exec(*cmd, env=env, cwd=ROOT)
    try:
        await eventually(lambda: cp_at_least(500), within=20, what="first commits")
        proc.kill()  # SIGKILL: no drain, possibly mid-transaction
        await proc.wait()
        killed_at = await checkpoint(pg_pool, "counting")
        assert killed_at < last, "the kill should land mid-stream"
        proc = await asyncio.create_subprocess_exec(*cmd, env=env, cwd=ROOT)
        await eventually(lambda: cp_at_least(last), within=60, what="catch-up after kill")
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()

    # The same events applied by an uninterrupted runner into another schema.
    async with ProjectionRunner(bus, pg_pool, CountingProjection("uninterrupted")) as runner:
        await runner.wait_until(RUNS, last)
    assert await rows(pg_pool, "counting") == await rows(pg_pool, "uninterrupted")
    assert await pg_pool.fetchval('SELECT count(*) FROM "counting".seen') == 6000


async def test_rebuild_swaps_in_identical_rows_while_live_runner_goes_on(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
):
    last = await publish_events(bus, 2000)
    async with ProjectionRunner(bus, pg_pool, CountingProjection(), batch=100) as runner:
        await runner.wait_until(RUNS, last)
        before = await rows(pg_pool, "counting")
        # Events keep coming while the rebuild runs.
        publisher = asyncio.create_task(publish_events(bus, 1000, start=2000))
        applied = await rebuild(bus, pg_pool, CountingProjection(), batch=300)
        last = await publisher
        await eventually(lambda: _cp_equals(pg_pool, last), within=20, what="live catch-up")
        after = await rows(pg_pool, "counting")
    assert applied >= 2000
    assert sum(n for _, _, n in after) == 3000
    assert sum(n for _, _, n in before) == 2000
    assert await pg_pool.fetchval('SELECT count(*) FROM "counting".seen') == 3000
    schemas = await pg_pool.fetch("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'counting%'")
    assert [s["nspname"] for s in schemas] == ["counting"]


async def _cp_equals(pool: asyncpg.Pool[Any], seq: int) -> bool:
    return await checkpoint(pool, "counting") == seq


async def test_undecodable_and_poison_events_are_dead_lettered_and_skipped(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
):
    await publish_events(bus, 10)
    await bus.nc.publish(subjects.run_event("run-x", "heartbeat"), b"\xff not json")
    await bus.nc.flush()
    last = await publish_events(bus, 10, start=10)
    poison = last - 3
    projection = CountingProjection(poison_seq=poison)
    runner = ProjectionRunner(bus, pg_pool, projection, retry_delays=(0.01,), max_attempts=2)
    async with runner:
        await runner.wait_until(RUNS, last)
    assert sum(n for _, _, n in await rows(pg_pool, "counting")) == 19
    seen = {r["seq"] for r in await pg_pool.fetch('SELECT seq FROM "counting".seen')}
    assert poison not in seen
    letters = [DeadLetter.model_validate_json(m.data) async for m in bus.replay_raw(DLQ)]
    assert sorted(letter.reason for letter in letters) == ["projection_failed", "undecodable"]
    assert {letter.stream_seq for letter in letters} == {11, poison}
    status = await projection_status(bus, pg_pool, projection)
    assert status[RUNS]["behind"] == 0


@pytest.mark.timeout(90)
async def test_survives_nats_restart(bus: Bus, pg_pool: asyncpg.Pool[Any], nats_server: Any):
    last = await publish_events(bus, 500)
    async with ProjectionRunner(bus, pg_pool, CountingProjection(), batch=50) as runner:
        await runner.wait_until(RUNS, last)
        nats_server.restart()
        last = await publish_events(bus, 500, start=500)
        await runner.wait_until(RUNS, last, within=30)
    assert sum(n for _, _, n in await rows(pg_pool, "counting")) == 1000


class TurnsOnly(CountingProjection):
    """Follows only `turn` events: shares a feed with an unfiltered projection."""

    name = "turns_only"
    sources = (Source(RUNS, (subjects.run_events_filter(None, "turn"),)),)


async def test_projections_sharing_a_stream_read_it_once_and_keep_own_checkpoints(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
):
    last = await publish_events(bus, 900)
    async with ProjectionRunner(bus, pg_pool, CountingProjection(), batch=100) as runner:
        await runner.wait_until(RUNS, last)
    # Now together: `counting` is up to date, `turns` starts from nothing.
    last = await publish_events(bus, 300, start=900)
    both = ProjectionRunner(bus, pg_pool, [CountingProjection(), TurnsOnly("turns")], batch=100)
    assert len(both.feeds) == 1
    before = {c.name async for c in _consumers(bus)}
    async with both:
        await both.wait_until(RUNS, last)
        after = {c.name async for c in _consumers(bus)}
    assert after - before == {both.feeds[0].consumer}  # one reader for both projections
    assert sum(n for _, _, n in await rows(pg_pool, "counting")) == 1200
    turns = await rows(pg_pool, "turns")
    assert {event for _, event, _ in turns} == {"turn"}
    assert sum(n for _, _, n in turns) == len([i for i in range(1200) if i % 3 == 0])
    assert await checkpoint(pg_pool, "turns") == last
    assert await checkpoint(pg_pool, "counting") == last


async def _consumers(bus: Bus) -> Any:
    for info in await bus.js.consumers_info(RUNS):
        yield info


async def test_a_live_commit_during_the_swap_neither_deadlocks_nor_fails(
    bus: Bus, pg_pool: asyncpg.Pool[Any], monkeypatch: pytest.MonkeyPatch
):
    last = await publish_events(bus, 300)
    async with ProjectionRunner(bus, pg_pool, CountingProjection(), batch=100) as runner:
        await runner.wait_until(RUNS, last)
    # Pause the rebuild inside its swap transaction, where it holds the live checkpoints.
    swapping, go_on = asyncio.Event(), asyncio.Event()
    replay_into = projection_module._replay_into
    calls = 0

    async def pausing(*args: Any, **kwargs: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:  # the catch-up after the live checkpoints are locked (one source)
            swapping.set()
            await go_on.wait()
        return await replay_into(*args, **kwargs)

    monkeypatch.setattr(projection_module, "_replay_into", pausing)
    rebuilding = asyncio.create_task(rebuild(bus, pg_pool, CountingProjection(), batch=100))
    await asyncio.wait_for(swapping.wait(), 20)

    async def live_commit() -> int:  # how every live runner's commit begins
        async with pg_pool.acquire() as conn, conn.transaction():
            return await projection_module._lock_checkpoint(conn, "counting", RUNS, "live")

    live = asyncio.create_task(live_commit())

    async def live_commit_waits() -> bool:
        return bool(
            await pg_pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )

    await eventually(live_commit_waits, within=10, what="the live commit waiting on a lock")
    go_on.set()
    assert await asyncio.wait_for(rebuilding, 30) == 300
    assert await asyncio.wait_for(live, 30) == last  # it went on, on the swapped-in table
    assert await rows(pg_pool, "counting") != []


class FlakyProjection(CountingProjection):
    """Fails its first `failures` applies (a transient error, not a poison event)."""

    def __init__(self, failures: int) -> None:
        super().__init__(schema="flaky")
        self.failures = failures
        self.calls = 0

    async def apply(self, conn: Any, schema: str, batch: Any) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"transient {self.calls}")
        await super().apply(conn, schema, batch)


async def test_a_batch_that_fails_transiently_is_retried_whole_after_the_delays(
    bus: Bus, pg_pool: asyncpg.Pool[Any], caplog: pytest.LogCaptureFixture
):
    last = await publish_events(bus, 12)
    projection = FlakyProjection(failures=2)
    runner = ProjectionRunner(
        bus, pg_pool, projection, batch=100, retry_delays=(0.01, 0.02), max_attempts=3
    )
    caplog.set_level("WARNING", logger="nexus_events.transport.projection")
    async with runner:
        await runner.wait_until(RUNS, last)
    assert projection.calls == 3  # two failures, then the whole batch at once (not split)
    assert [r.getMessage() for r in caplog.records if "batch failed" in r.getMessage()] == [
        "projection counting batch failed (transient 1), retry 1",
        "projection counting batch failed (transient 2), retry 2",
    ]
    assert sum(n for _, _, n in await rows(pg_pool, "flaky")) == 12
    assert [m async for m in bus.replay_raw(DLQ)] == []
