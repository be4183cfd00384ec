"""Chat conversations on real NATS and PostgreSQL with the fake Slack (the three-message
thread across a kill -9 is in test_kill.py): an idle conversation told [abandoned] once and
started afresh; a planned stop telling live conversations once; a sleeping run's line in its
thread. `EchoRunner` answers each run by echoing what its request carried, as the offline
model echoes what it is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import (
    ConversationEnded,
    RunSleeping,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.gateway import (
    SIGNING_SECRET,
    EchoRunner,
    channel_events,
    pair,
    run_requests,
)

from nexus_channel_gateway.app import GatewayApp

MakeGateway = Callable[..., Awaitable[GatewayApp]]

T1 = "1700002000.000100"


async def _said(url: str, text: str, ts: str, event_id: str, thread: str | None = None) -> None:
    payload = event_callback(f"<@UBOT> {text}", ts=ts, event_id=event_id, thread_ts=thread)
    assert (await post_event(url, payload, SIGNING_SECRET))[0] == 200


async def _posted(slack: FakeSlack, needle: str) -> list[str]:
    return [p.text for p in slack.posts if needle in p.text and p.thread_ts == T1]


async def test_an_idle_conversation_is_told_abandoned_once_and_a_new_message_starts_afresh(
    bus: Bus, make_gateway: MakeGateway, slack: FakeSlack, echo: EchoRunner
) -> None:
    await pair(bus, "slack", "U1")
    clock = ManualClock(datetime.now(UTC))
    app = await make_gateway(conversation_idle_seconds=600, conversation_sweep_seconds=3600)
    assert app.conversations is not None
    app.conversations.clock = clock
    url = f"http://127.0.0.1:{app.port}/slack/events"
    await _said(url, "run helper: remember the blue door", T1, "E1")
    await eventually(lambda: _posted(slack, "echo[user: remember the blue door]"), what="answer")
    await eventually(lambda: _idle(app, clock), within=30, what="the answer folded")

    clock.advance(601)
    assert await app.conversations.sweep() == 1
    assert await app.conversations.sweep() == 0  # ended: once
    await eventually(lambda: _posted(slack, "[abandoned]"), what="the abandoned note")
    ended = await channel_events(bus, "conversation_ended")
    assert [type(d.event) for d in ended] == [ConversationEnded]

    await _said(url, "what door?", "1700002003.000100", "E2", thread=T1)
    await eventually(lambda: _posted(slack, "echo[user: what door?]"), what="a fresh start")
    assert len(await _posted(slack, "[abandoned]")) == 1


async def test_a_planned_stop_tells_each_live_conversation_once(
    bus: Bus, make_gateway: MakeGateway, slack: FakeSlack, echo: EchoRunner
) -> None:
    await pair(bus, "slack", "U1")
    first = await make_gateway()
    url = f"http://127.0.0.1:{first.port}/slack/events"
    await _said(url, "run helper: hello", T1, "E1")
    await eventually(lambda: _posted(slack, "echo[user: hello]"), what="the answer")
    await first.stop()
    # A second gateway stopped with nothing said since: the same note, not posted again.
    second = await make_gateway()
    await second.stop()
    third = await make_gateway()
    await eventually(lambda: _posted(slack, "[shutting down]"), what="the shutdown note")
    await asyncio.sleep(1.0)  # the sender would have posted a second one by now
    assert len(await _posted(slack, "[shutting down]")) == 1
    await third.stop()


async def test_a_sleeping_run_says_until_when_in_its_thread(
    bus: Bus, gateway: object, slack: FakeSlack, echo: EchoRunner
) -> None:
    await pair(bus, "slack", "U1")
    url = f"http://127.0.0.1:{gateway.port}/slack/events"  # type: ignore[attr-defined]
    await _said(url, "run helper: wait for CI", T1, "E1")
    requests = await eventually(lambda: _at_least(run_requests(bus), 1), what="the run")
    run_id = requests[0].address.run_id  # type: ignore[index]
    until = datetime(2026, 11, 30, 14, 5, tzinfo=UTC)
    sleeping = RunSleeping(until=until, reason="CI takes an hour", attempt=1, turn=2)
    await bus.publish(subjects.run_event(run_id, RunEvent.SLEEPING), sleeping)
    await eventually(
        lambda: _posted(slack, "sleeping until 2026-11-30 14:05 UTC (CI takes an hour)"),
        what="the sleeping line",
    )


async def _idle(app: object, clock: ManualClock) -> bool:
    conversations = app.conversations  # type: ignore[attr-defined]
    live = await conversations.store.live_conversations()
    return bool(live) and live[0].live_run is None


async def _at_least(coro: object, n: int) -> object:
    found = await coro  # type: ignore[misc]
    return found if len(found) >= n else None
