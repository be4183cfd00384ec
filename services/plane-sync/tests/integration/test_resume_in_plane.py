"""A resumed run says so on its work item, once per attempt (real NATS + PostgreSQL, fake Plane)."""

from __future__ import annotations

from nexus_events.events import RunRequested, RunResuming
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import FakePlane
from tests.support.plane_sync import complete, publish_run, run_events, start_run

from nexus_plane_sync.app import PlaneSyncApp


async def test_a_resumed_run_comments_once_per_attempt(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Port the parser", labels=["agent:implementer"])

    async def requested() -> str | None:
        found = [d.address.run_id for d in await run_events(bus, "requested")]
        return found[0] if found and isinstance(found[0], str) else None

    run_id: str = await eventually(requested, what="run requested")
    assert isinstance((await run_events(bus, "requested"))[0].event, RunRequested)
    await start_run(bus, run_id)
    resuming = RunResuming(attempt=2, reason="runtime_gone", message="pod evicted")
    await publish_run(bus, run_id, "resuming", resuming)
    await publish_run(bus, run_id, "resuming", resuming)  # the scheduler said it again
    await complete(bus, run_id)
    await eventually(lambda: len(plane.comments_of(item)) >= 3, within=30, what="comments")
    await plane.settle()
    texts = [c["comment_html"] for c in plane.comments_of(item)]
    resumed = [t for t in texts if "Resumed after runner loss" in t]
    assert len(texts) == 3, texts  # started, resumed, result
    assert len(resumed) == 1
    assert "(attempt 2)" in resumed[0]
    assert "pod evicted" in resumed[0]
    assert texts.index(resumed[0]) == 1
