"""A small projection used by the projection tests: counts run events per run and event name.

Runnable as a process (``python -m ...counting_projection NATS_URL DSN``) so a test can kill it
with SIGKILL mid-stream.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Sequence
from typing import Any

import asyncpg
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import RUNS
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.projection import ProjectionRunner, Source, quote_ident


class CountingProjection:
    name = "counting"
    sources = (Source(RUNS),)

    def __init__(self, schema: str = "counting", poison_seq: int | None = None) -> None:
        self.schema = schema
        self.poison_seq = poison_seq

    async def create(self, conn: asyncpg.Connection[Any], schema: str) -> None:
        q = quote_ident(schema)
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {q}.counts (run_id text, event text, n bigint NOT NULL,"
            " PRIMARY KEY (run_id, event))"
        )
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {q}.seen (seq bigint PRIMARY KEY, run_id text NOT NULL)"
        )

    async def apply(
        self, conn: asyncpg.Connection[Any], schema: str, batch: Sequence[Decoded]
    ) -> None:
        q = quote_ident(schema)
        if self.poison_seq is not None and any(
            d.envelope.stream_seq == self.poison_seq for d in batch
        ):
            raise ValueError(f"cannot apply seq {self.poison_seq}")
        # `seen` has a primary key on seq: applying an event twice fails loudly.
        await conn.copy_records_to_table(
            "seen",
            schema_name=schema,
            records=[(d.envelope.stream_seq, d.address.run_id) for d in batch],
        )
        counts: dict[tuple[str, str], int] = {}
        for d in batch:
            key = (d.address.run_id or "", d.address.event or "")
            counts[key] = counts.get(key, 0) + 1
        await conn.executemany(
            f"INSERT INTO {q}.counts (run_id, event, n) VALUES ($1, $2, $3) "
            "ON CONFLICT (run_id, event) DO UPDATE SET n = counts.n + EXCLUDED.n",
            [(r, e, n) for (r, e), n in counts.items()],
        )


async def _main(nats_url: str, dsn: str) -> None:
    bus = await Bus.connect(BusSettings(url=nats_url), source="counting")
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    assert pool is not None
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    # Small batches so a kill lands mid-stream with many commits behind it.
    async with ProjectionRunner(bus, pool, CountingProjection(), batch=50):
        print("ready", flush=True)
        await stop.wait()
    await pool.close()
    await bus.close()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2]))
