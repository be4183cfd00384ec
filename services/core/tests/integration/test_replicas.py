"""Two core replicas on one NATS and one database: the lease holder projects, both answer.

The kill test runs two real `python -m nexus_core` processes and SIGKILLs the holder: its key
is left to expire, and the standby must take over within the TTL plus a margin. The in-process
tests show the rest cheaply: a clean stop hands over at once (a TTL far longer than the test),
and a holder that lost its key stops projecting (fenced) while the new holder goes on.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import nats.js.errors
import pytest
from nats.js.kv import KV_DEL
from nexus_events.contract import subjects
from nexus_events.events import RunCompleted, RunResult, RunStarted
from nexus_events.runtime.lease import LEADER_KEY
from nexus_events.transport.bus import Bus, Outgoing
from nexus_testing import endpoint_requests, free_port, http_status, micro_stats

from nexus_core.app import CoreApp

from .conftest import core_settings
from .support import eventually, query

BUCKET = "nexus_core_lease"
# The kill test's lease: short, so the takeover is quick; long enough that renewals every
# third of it are not missed on a busy 2-core machine (a missed one would flap the leader).
KILL_TTL = 2.0
# What a takeover may take beyond the TTL: a standby round (TTL/10), starting the runners and
# one fetch (0.2 s), and a loaded machine's scheduling.
TAKEOVER_MARGIN = 4.0


async def _publish_run(bus: Bus, run_id: str) -> None:
    await bus.publish_many([
        Outgoing(subjects.run_event(run_id, "started"), RunStarted(runner="host")),
        Outgoing(subjects.run_event(run_id, "completed"),
                 RunCompleted(result=RunResult(summary=f"done {run_id}"))),
    ])  # fmt: skip


async def _run_status(bus: Bus, run_id: str) -> str | None:
    error, body = await query(bus, subjects.CORE_RUNS_GET, {"run_id": run_id})
    return None if error else str(body["status"])


async def _holder(bus: Bus) -> str | None:
    """The lease key's value as stored now (None: no key)."""
    kv = await bus.js.key_value(BUCKET)
    try:
        entry = await kv.get(LEADER_KEY)
    except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
        return None
    return None if entry.value is None else entry.value.decode()


async def _roles(bus: Bus) -> dict[str, str]:
    """replica -> role, as the replicas answering `projections.status` say (any may answer)."""
    seen: dict[str, str] = {}
    for _ in range(20):
        error, body = await query(bus, subjects.CORE_PROJECTIONS_STATUS)
        assert error is None, body
        lead = body["leadership"]
        seen[lead["replica"]] = lead["role"]
    return seen


@pytest.fixture
async def replicas(bus: Bus, core_pool: asyncpg.Pool[Any]) -> AsyncIterator[list[CoreApp]]:
    """Two in-process cores whose lease outlives the test: only a delete hands it over."""
    apps = [CoreApp(core_settings(lease_ttl_seconds=60), bus=bus, pool=core_pool) for _ in "ab"]
    for app in apps:
        await app.start()
    try:
        yield apps
    finally:
        for app in apps:
            await app.stop()


async def test_kill_9_of_the_projecting_core_the_standby_takes_over(
    bus: Bus, nats_url: str, pg_dsn: str
) -> None:
    ports = [free_port(), free_port()]

    async def spawn(port: int) -> asyncio.subprocess.Process:
        env = {
            **os.environ, "NEXUS_NATS_URL": nats_url, "NEXUS_DATABASE_URL": pg_dsn,
            "NEXUS_HEALTH_PORT": str(port), "NEXUS_FETCH_TIMEOUT": "0.2",
            "NEXUS_LEASE_TTL_SECONDS": str(KILL_TTL), "NEXUS_MEMORY_ENABLED": "false",
            "OTEL_SDK_DISABLED": "true",
        }  # fmt: skip
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nexus_core", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip

    procs = [await spawn(port) for port in ports]
    try:
        for port in ports:
            await eventually(
                lambda p=port: http_status(p, "/readyz"), lambda s: s == 200, within=60
            )
        holder = await eventually(lambda: _holder(bus), lambda h: h is not None)
        assert holder is not None
        leader = next(p for p in procs if holder.split("/")[1] == str(p.pid))
        standby = next(p for p in procs if p is not leader)
        # One replica projects, the other stands by; both answer queries.
        roles = await eventually(lambda: _roles(bus), lambda r: len(r) == 2, within=20)
        assert sorted(roles.values()) == ["leader", "standby"]
        assert roles[holder] == "leader"
        await _publish_run(bus, "before-kill")
        await eventually(lambda: _run_status(bus, "before-kill"), lambda s: s == "completed")
        for _ in range(20):
            assert await _run_status(bus, "before-kill") == "completed"
        stats = await micro_stats(bus, "nexus-core", 2)
        assert all(endpoint_requests(s, "runs-get") > 0 for s in stats), stats

        leader.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        await leader.wait()
        await _publish_run(bus, "after-kill")
        await eventually(
            lambda: _run_status(bus, "after-kill"),
            lambda s: s == "completed",
            within=KILL_TTL + TAKEOVER_MARGIN,
            what="the standby projects within the TTL plus a margin",
        )
        took = time.monotonic() - killed
        new_holder = await _holder(bus)
        assert new_holder is not None
        assert new_holder.split("/")[1] == str(standby.pid)
        print(f"takeover after kill -9: projected {took:.2f} s after the kill (TTL {KILL_TTL} s)")
        assert await _roles(bus) == {new_holder: "leader"}

        # A clean stop deletes the key (a DEL the watch sees) instead of leaving it to expire.
        watcher = await (await bus.js.key_value(BUCKET)).watch(LEADER_KEY)
        standby.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(standby.wait(), 30) == 0
        ops = []
        while KV_DEL not in ops:
            entry = await watcher.updates(timeout=5)
            if entry is not None:
                ops.append(entry.operation)
        await watcher.stop()  # type: ignore[no-untyped-call]
        # The takeover is one INFO line; no error and no traceback anywhere in its log.
        assert standby.stdout is not None
        log = (await standby.stdout.read()).decode()
        assert log.count("core: leading (lease nexus_core_lease") == 1, log
        assert "Traceback" not in log, log
        assert '"level": "ERROR"' not in log, log
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_one_replica_projects_and_a_clean_stop_hands_over_at_once(
    bus: Bus, replicas: list[CoreApp]
) -> None:
    first, second = replicas
    assert first.leadership is not None
    assert second.leadership is not None
    assert (first.leadership.role, second.leadership.role) == ("leader", "standby")
    assert first.views_runner is not None
    assert first.catalog_runner is not None
    assert second.followers() == []
    assert second.leadership.status().holder == first.leadership.holder
    await _publish_run(bus, "r-first")
    await eventually(lambda: _run_status(bus, "r-first"), lambda s: s == "completed")

    started = time.monotonic()
    await first.stop()
    # The TTL is 60 s: only the deleted key explains a takeover this quick.
    await eventually(lambda: second.leadership.role == "leader", within=5)  # type: ignore[union-attr]
    assert time.monotonic() - started < 5
    assert second.views_runner is not None
    await _publish_run(bus, "r-second")
    await eventually(lambda: _run_status(bus, "r-second"), lambda s: s == "completed")
    assert await _holder(bus) == second.leadership.holder
    error, status = await query(bus, subjects.CORE_PROJECTIONS_STATUS)
    assert error is None
    assert status["leadership"] == {
        "role": "leader",
        "replica": second.leadership.holder,
        "holder": second.leadership.holder,
        "lease_bucket": BUCKET,
    }


async def test_a_holder_that_lost_its_key_stops_projecting(
    bus: Bus, replicas: list[CoreApp]
) -> None:
    first, second = replicas
    assert first.leadership is not None
    assert second.leadership is not None
    kv = await bus.js.key_value(BUCKET)
    entry = await kv.get(LEADER_KEY)
    # Someone else's now, as after an expiry during a pause of this replica.
    await kv.update(LEADER_KEY, b"elsewhere/1/0", last=entry.revision)
    # It steps down by itself: the watch told it, no renewal had to fail first.
    await eventually(
        lambda: first.leadership.role == "standby" and first.followers() == [], within=5
    )  # type: ignore[union-attr]
    assert second.followers() == []
    assert not await first.leadership.fence()
    # The intruder goes away (a clean stop): a replica takes over at once and projects.
    await kv.delete(LEADER_KEY)
    await eventually(
        lambda: "leader" in (first.leadership.role, second.leadership.role),  # type: ignore[union-attr]
        within=5,
    )
    await _publish_run(bus, "r-after")
    await eventually(lambda: _run_status(bus, "r-after"), lambda s: s == "completed")
    assert [a.leadership.role for a in replicas].count("leader") == 1  # type: ignore[union-attr]
