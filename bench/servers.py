"""Real servers for benchmarks: the same nats-server and PostgreSQL the tests use, and a
whole local stack (`nexus dev up --offline-model`) for the benchmarks that need one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

from nexus_testing import NatsServer, PostgresServer

from scripts.chaos_flows import Nexus, cli
from tests.support import devstack


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


@contextlib.asynccontextmanager
async def offline_stack(
    prefix: str, extra: Mapping[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[tuple[Path, Nexus]]:
    """`nexus dev up --offline-model` in a temporary home (this interpreter's CLI first on
    PATH, `extra` in its environment): the home's directory and a `nexus` running there (or
    in `cwd`); `nexus dev down` at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        tmp = Path(name)
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env = devstack.stack_env(tmp, {"PATH": path, **(extra or {})}, drop=("NEXUS_", "OPENAI_"))
        nexus = cli(env, cwd or tmp)
        up = await asyncio.to_thread(nexus, "dev", "up", "--offline-model", "-o", "json",
                                     timeout=180)  # fmt: skip
        if up.returncode != 0:
            raise RuntimeError(f"nexus dev up failed: {up.stderr or up.stdout}")
        try:
            yield tmp, nexus
        finally:
            await asyncio.to_thread(nexus, "dev", "down", timeout=120)
