"""Smoke of the event bus on real embedded servers (`make smoke`; README's main job until the
CLI lands).

Starts nats-server and PostgreSQL from their wheels, ensures the streams, drives one run
through its lifecycle the way services will, publishes a bare JSON body like `nats pub` and a
garbage message, projects run status into PostgreSQL and prints what happened.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
from nexus_events.contract import runstate, subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import DLQ, RUNS, ensure_streams
from nexus_events.events import (
    DeadLetter,
    ModelSpec,
    RunCompleted,
    RunConfig,
    RunDispatched,
    RunPrepared,
    RunResult,
    RunStarted,
    RunTurn,
)
from nexus_events.transport.bus import Bus, BusSettings, ConsumerSpec, Delivery
from nexus_events.transport.projection import Conn, ProjectionRunner, Source, quote_ident
from nexus_testing import NatsServer, PostgresServer


class RunStatusProjection:
    """Smallest useful projection: one row per run with its status."""

    name = "smoke_runs"
    schema = "smoke"
    sources = (Source(RUNS),)

    async def create(self, conn: Conn, schema: str) -> None:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quote_ident(schema)}.runs"
            " (run_id text PRIMARY KEY, status text NOT NULL, events int NOT NULL)"
        )

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        table = f"{quote_ident(schema)}.runs"
        for d in batch:
            run_id, event = d.address.run_id, d.address.event or ""
            current = await conn.fetchval(f"SELECT status FROM {table} WHERE run_id=$1", run_id)
            status = runstate.next_status(current, event) or current
            await conn.execute(
                f"INSERT INTO {table} VALUES ($1, $2, 1) ON CONFLICT (run_id) DO UPDATE"
                f" SET status = $2, events = {table}.events + 1",
                run_id,
                status,
            )


async def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="nexus-smoke-"))
    nats_server = NatsServer(base / "nats")
    nats_server.start()
    postgres = PostgresServer(base / "pg")
    print(f"nats-server {nats_server.url}  (JetStream store {base / 'nats'})")
    print(f"postgresql  {postgres.admin_dsn}")
    try:
        await drive(nats_server.url, await postgres.create_database("smoke"))
    finally:
        nats_server.stop()
        postgres.close()
        shutil.rmtree(base, ignore_errors=True)


async def drive(nats_url: str, dsn: str) -> None:
    bus = await Bus.connect(BusSettings(url=nats_url), source="smoke")
    report = await ensure_streams(bus.js)
    print(f"streams created: {', '.join(report.created)}")

    run_id = "run-smoke-1"
    # A person types this with the nats CLI: no headers, just JSON.
    await bus.nc.publish(
        subjects.run_event(run_id, "requested"),
        b'{"agent_id": "implementer", "task_id": "T-1", "input": "fix the failing test"}',
    )
    await bus.nc.publish(subjects.run_event("run-bad", "requested"), b"not json at all")
    config = RunConfig(
        run_id=run_id,
        agent_id="implementer",
        task_id="T-1",
        system_prompt="You fix failing tests.",
        model=ModelSpec(name="offline-scripted"),
    )
    for subject, event in [
        (subjects.run_event(run_id, "prepared"), RunPrepared(config=config)),
        (subjects.run_event(run_id, "dispatched"), RunDispatched(runtime="local", handle="pid-1")),
        (subjects.run_event(run_id, "started"), RunStarted(runner="smoke")),
        (subjects.run_event(run_id, "turn"), RunTurn(turn=1, tokens_in=120, tokens_out=40)),
        (
            subjects.run_event(run_id, "completed"),
            RunCompleted(result=RunResult(summary="fixed test_add", files_changed=["calc.py"])),
        ),
    ]:
        await bus.publish(subject, event)
    dup = await bus.publish(subjects.run_event(run_id, "started"), RunStarted(runner="smoke"))
    print(f"republished `started`: duplicate={dup.duplicate} (deduplicated by Nats-Msg-Id)")

    seen: list[str] = []

    async def record(batch: list[Delivery]) -> None:
        seen.extend(f"{d.address.event}:{d.envelope.source}" for d in batch)

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    assert pool is not None
    info = await bus.js.stream_info(RUNS)
    consumer = bus.consumer(ConsumerSpec(stream=RUNS, durable="smoke"), record)
    async with consumer, ProjectionRunner(bus, pool, RunStatusProjection()) as runner:
        await runner.wait_until(RUNS, info.state.last_seq)
        async with asyncio.timeout(10):
            while consumer.processed + consumer.dead_lettered < info.state.messages:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # the consumer's counters have no event to await
    print(f"consumer handled {len(seen)} events: {' '.join(seen)}")
    rows: list[Any] = await pool.fetch('SELECT run_id, status, events FROM "smoke".runs')
    for row in rows:
        print(f"agent_runs-like row: {dict(row)}")
    letters = [DeadLetter.model_validate_json(m.data) async for m in bus.replay_raw(DLQ)]
    for letter in letters:
        print(
            f"dead letter from {letter.service} ({letter.consumer}): {letter.subject}"
            f" reason={letter.reason}"
        )
    await pool.close()
    await bus.close()
    ok = any(r["status"] == "completed" for r in rows) and len(letters) >= 1
    print("smoke OK" if ok else "smoke FAILED")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    asyncio.run(main())
