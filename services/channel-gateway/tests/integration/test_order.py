"""Order where people see it, with the durable handlers on FastStream (which handles the
messages of one fetch concurrently unless a handler is ordered): a run's progress reads in
order in its thread even when Slack rate-limits the first post, and messages right behind
their sender's pairing in the stream are judged with that pairing applied."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.events import ChannelMessageIn, RunCompleted, RunStarted
from nexus_events.events.runs import RunResult
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.gateway import SIGNING_SECRET, channel_events, pair, run_requests

from nexus_channel_gateway.app import GatewayApp

MakeGateway = Callable[..., Awaitable[GatewayApp]]


def url(app: GatewayApp) -> str:
    return f"http://127.0.0.1:{app.port}/slack/events"


async def test_a_rate_limited_post_is_not_overtaken_by_the_runs_later_progress(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    # The "requested" notice gets both 429s; "started" and "completed" are in the stream
    # behind it while it waits.
    slack.rate_limit(2, retry_after=1)
    ts = "1700000600.000100"
    await post_event(url(gateway), event_callback("<@UBOT> run x: y", ts=ts), SIGNING_SECRET)
    requests = await eventually(lambda: run_requests(bus), what="run requested")
    run_id = requests[0].address.run_id
    assert run_id is not None
    await bus.publish(subjects.run_event(run_id, "started"), RunStarted(runner="pod-1"))
    await bus.publish(
        subjects.run_event(run_id, "completed"), RunCompleted(result=RunResult(summary="done"))
    )
    thread = await eventually(
        lambda: (t := slack.thread("C1", ts)) and len(t) >= 3 and t, within=30, what="posts"
    )
    assert slack.rate_limited_calls == 2
    assert len(thread) == 3
    assert "requested" in thread[0]
    assert "started" in thread[1]
    assert "completed" in thread[2]


async def test_messages_right_behind_their_senders_pairing_start_runs(
    bus: Bus, make_gateway: MakeGateway, slack: FakeSlack
) -> None:
    # In the stream before the gateway starts, so the router fetches them together: the
    # pairing first, then five messages of that sender (none waits for the pairing).
    await pair(bus, "slack", "U2")
    for n in range(5):
        await bus.publish(
            subjects.channel_event("slack", "in"),
            ChannelMessageIn(
                conversation="C1", text=f"run x: job {n}", user="U2", message_id=f"m{n}"
            ),
            msg_id=f"in:m{n}",
        )
    gateway = await make_gateway()

    async def five_requests() -> list[Decoded] | None:
        found = await run_requests(bus)
        return found if len(found) >= 5 else None

    requests = await eventually(five_requests, what="run requests")
    assert len({d.address.run_id for d in requests}) == 5
    await eventually(lambda: len(slack.posts) >= 5 and slack.posts, what="requested notices")
    # The router had judged every message when their runs were asked for: no challenge.
    assert await channel_events(bus, "pairing_requested") == []
    assert gateway.metrics.counts["inbound", "slack", "unpaired"] == 0
    assert all("nexus pair approve" not in p.text for p in slack.posts)
