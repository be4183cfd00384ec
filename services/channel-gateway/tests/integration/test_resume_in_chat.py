"""A chat-started run that resumes after its runner was lost says so in its thread, once per
attempt (real NATS + PostgreSQL, fake Slack)."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.events import RunCompleted, RunResuming, RunStarted
from nexus_events.events.runs import RunResult
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.gateway import SIGNING_SECRET, pair, run_requests

from nexus_channel_gateway.app import GatewayApp


async def test_the_thread_hears_of_each_resume_once(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    ts = "1700000700.000100"
    url = f"http://127.0.0.1:{gateway.port}/slack/events"
    await post_event(url, event_callback("<@UBOT> run x: y", ts=ts), SIGNING_SECRET)
    requests = await eventually(lambda: run_requests(bus), what="run requested")
    run_id = requests[0].address.run_id
    assert run_id is not None
    resuming = RunResuming(attempt=2, reason="heartbeat_missing", message="no heartbeat in 90s")
    for name, event in (
        ("started", RunStarted(runner="pod-1")),
        ("resuming", resuming),
        ("resuming", resuming),  # said again (a redelivery, a second scheduler): one post
        ("completed", RunCompleted(result=RunResult(summary="done"))),
    ):
        await bus.publish(subjects.run_event(run_id, name), event)
    thread = await eventually(
        lambda: (t := slack.thread("C1", ts)) and len(t) >= 4 and t, within=30, what="posts"
    )
    assert "started" in thread[1]
    assert thread[2] == (
        f"🔁 Run `{run_id}` resumed after runner loss (attempt 2): heartbeat_missing"
        " (no heartbeat in 90s)"
    )
    assert "completed" in thread[3]
    assert len(thread) == 4
