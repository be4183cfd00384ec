"""Two memory replicas on one NATS and one database: the lease holder projects, both answer,
and a holder that stops renewing (a paused or dead process) is replaced within the TTL."""

from __future__ import annotations

import asyncio
import contextlib
import time

from nexus_events.transport.bus import Bus
from nexus_testing import endpoint_requests, eventually, micro_stats

from services.memory.tests.conftest import MakeApp
from services.memory.tests.support import record, search, until_found

# Short, so the takeover is quick; renewals every second survive a busy 2-core machine
# (at 1.5 s the holder lost its lease once to a stall in a full test run).
TTL = 3.0
# Beyond the TTL: a standby round (TTL/10), starting the runner, a loaded machine.
MARGIN = 5.0


async def test_one_replica_projects_and_a_silent_holder_is_replaced(
    make_memory: MakeApp, bus: Bus
) -> None:
    first = await make_memory(lease_ttl_seconds=TTL)
    second = await make_memory(lease_ttl_seconds=TTL)
    assert first.leadership is not None
    assert second.leadership is not None
    assert (first.leadership.role, second.leadership.role) == ("leader", "standby")
    assert first.runner is not None
    assert second.runner is None
    mid = await record(bus, "Deploys go out on Tuesdays after the freeze", "global")
    await until_found(bus, "which day do deploys go out", ["global"], mid)
    for _ in range(20):
        assert any(i["memory_id"] == mid for i in await search(bus, "deploy day", ["global"]))
    stats = await micro_stats(bus, "nexus-memory", 2)
    assert all(endpoint_requests(s, "search") > 0 for s in stats), stats

    # The holder goes silent (no more rounds or renewals) without giving the key back.
    lead = first.leadership
    for task in (lead._campaign, lead._renewal):
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    silent = time.monotonic()
    await eventually(lambda: second.leadership.role == "leader", within=TTL + MARGIN)  # type: ignore[union-attr]
    took = time.monotonic() - silent
    print(f"memory takeover {took:.2f} s after the holder went silent (TTL {TTL} s)")
    assert second.runner is not None
    # The silent one knows it may no longer act: no write of its own within the TTL.
    assert not await first.leadership.fence()
    later = await record(bus, "Releases are tagged vX.Y.Z by the release job", "global")
    await until_found(bus, "how are releases tagged", ["global"], later)
