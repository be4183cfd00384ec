"""Ordered, idempotent schema migrations, each applied once per schema and recorded there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from nexus_events.transport.projection import quote_ident

MIGRATIONS_TABLE = "schema_migrations"

# What a projection callback or a pool hands out.
Conn: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"


async def migrate(conn: Conn, schema: str, migrations: Sequence[str]) -> int:
    """Apply the migrations of `schema` not yet recorded there; return how many ran.

    Each migration is SQL with ``{schema}`` standing for the quoted schema name. A transaction
    advisory lock serializes concurrent starts of several replicas.
    """
    q = quote_ident(schema)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"migrate:{schema}")
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {q}.{MIGRATIONS_TABLE} ("
            " version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {
            r["version"] for r in await conn.fetch(f"SELECT version FROM {q}.{MIGRATIONS_TABLE}")
        }
        ran = 0
        for version, sql in enumerate(migrations, start=1):
            if version in done:
                continue
            await conn.execute(sql.format(schema=q))
            await conn.execute(f"INSERT INTO {q}.{MIGRATIONS_TABLE} (version) VALUES ($1)", version)
            ran += 1
        return ran
