"""Real servers for benchmarks: the same nats-server and PostgreSQL the tests use."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from nexus_testing import NatsServer, PostgresServer


@contextlib.contextmanager
def servers() -> Iterator[tuple[NatsServer, PostgresServer]]:
    base = Path(tempfile.mkdtemp(prefix="nxbench-"))
    nats = NatsServer(base / "nats")
    nats.start()
    pg = PostgresServer(base / "pg")
    try:
        yield nats, pg
    finally:
        nats.stop()
        pg.close()
        shutil.rmtree(base, ignore_errors=True)
