"""A sleeping run says "sleeping until" on its work item once per sleep, and its wake says
why it woke (real NATS + PostgreSQL, fake Plane)."""

from __future__ import annotations

from datetime import UTC, datetime

from nexus_events.events import RunResuming, RunSleeping, RunWake, WakeCause
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import FakePlane
from tests.support.plane_sync import complete, publish_run, run_events, start_run

from nexus_plane_sync.app import PlaneSyncApp


async def test_a_sleep_comments_once_and_the_wake_says_why(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Wait for CI", labels=["agent:implementer"])

    async def requested() -> str | None:
        found = [d.address.run_id for d in await run_events(bus, "requested")]
        return found[0] if found and isinstance(found[0], str) else None

    run_id: str = await eventually(requested, what="run requested")
    await start_run(bus, run_id)
    until = datetime(2026, 11, 29, 14, 5, tzinfo=UTC)
    sleeping = RunSleeping(until=until, reason="CI runs", attempt=1, turn=2)
    await publish_run(bus, run_id, "sleeping", sleeping)
    await publish_run(bus, run_id, "sleeping", sleeping)  # redelivered or said again
    wake = RunWake(cause=WakeCause.TIMER, slept_until=until, sleep_reason="CI runs")
    await publish_run(bus, run_id, "resuming", RunResuming(attempt=2, reason="woke", wake=wake))
    await complete(bus, run_id)
    await eventually(lambda: len(plane.comments_of(item)) >= 4, within=30, what="comments")
    await plane.settle()
    texts = [c["comment_html"] for c in plane.comments_of(item)]
    assert len(texts) == 4, texts  # started, sleeping, woke, result
    assert "Sleeping until 2026-11-29 14:05 UTC: CI runs." in texts[1]
    assert "Woke (timer)" in texts[2]
    assert "attempt 2" in texts[2]
