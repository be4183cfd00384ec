"""Slack end to end on real NATS + PostgreSQL and the fake Slack Web API: a mention starts a
run, its progress comes back in the thread, retries start one run, bad requests are refused."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import aiohttp
from nexus_events.contract import subjects
from nexus_events.events import (
    ApprovalDecision,
    ApprovalRequested,
    InboxMessage,
    RunCompleted,
    RunFailed,
    RunRequested,
    RunStarted,
)
from nexus_events.events.runs import RunResult
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.approvals import cli_decides
from tests.support.gateway import SIGNING_SECRET, channel_events, inbox_of, pair, run_requests

from nexus_channel_gateway.app import GatewayApp


def url(app: GatewayApp) -> str:
    return f"http://127.0.0.1:{app.port}/slack/events"


async def test_mention_starts_a_run_and_its_progress_comes_back_in_the_thread(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    ts = "1700000100.000100"
    status, _ = await post_event(
        url(gateway),
        event_callback("<@UBOT> run implementer: fix the login bug", ts=ts, channel="C9"),
        SIGNING_SECRET,
    )
    assert status == 200
    requests = await eventually(lambda: run_requests(bus), what="run requested")
    assert len(requests) == 1
    request = requests[0].event
    assert isinstance(request, RunRequested)
    assert (request.agent_id, request.input) == ("implementer", "fix the login bug")
    assert request.reply_to is not None
    assert (request.reply_to.channel, request.reply_to.conversation) == ("slack", "C9")
    assert request.reply_to.thread == ts
    run_id = requests[0].address.run_id
    assert run_id is not None
    # The runner's events for that run come back as messages in the thread.
    await bus.publish(subjects.run_event(run_id, "started"), RunStarted(runner="pod-1"))
    await bus.publish(
        subjects.run_event(run_id, "completed"),
        RunCompleted(result=RunResult(summary="fixed the session cookie")),
    )
    thread = await eventually(
        lambda: (t := slack.thread("C9", ts)) and len(t) >= 3 and t, what="three posts in thread"
    )
    assert "requested" in thread[0]
    assert "started" in thread[1]
    assert "completed" in thread[2]
    assert "fixed the session cookie" in thread[2]
    sent = await eventually(lambda: channel_events(bus, "sent"), what="outcomes")
    assert {d.event.status for d in sent} == {"sent"}  # type: ignore[attr-defined]


async def test_the_same_event_delivered_three_times_starts_one_run(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    payload = event_callback("<@UBOT> run tester: run the suite", ts="1700000200.000100")
    answers = [
        await post_event(url(gateway), payload, SIGNING_SECRET, retry_num=n) for n in (None, 1, 2)
    ]
    assert [status for status, _ in answers] == [200, 200, 200]
    await eventually(lambda: run_requests(bus), what="run requested")
    # The same message under a new event id (Slack sends mentions in DMs twice) is one too.
    again = dict(payload, event_id="Ev-other")
    assert (await post_event(url(gateway), again, SIGNING_SECRET))[0] == 200
    await eventually(lambda: slack.posts, what="the requested notice")
    assert len(await run_requests(bus)) == 1
    assert gateway.metrics.counts["inbound", "slack", "accepted"] == 1
    assert gateway.metrics.counts["inbound", "slack", "duplicate"] == 3
    assert gateway.metrics.counts["inbound", "slack", "retry"] == 2


async def test_forged_stale_malformed_oversized_and_unpaired_are_refused_and_counted(
    bus: Bus, make_gateway: object, slack: FakeSlack
) -> None:
    gateway = await make_gateway(gateway_max_body=4000)  # type: ignore[operator]
    payload = event_callback("<@UBOT> run implementer: x", ts="1700000300.000100")
    forged = await post_event(url(gateway), payload, "not-the-secret")
    stale = await post_event(
        url(gateway), payload, SIGNING_SECRET, timestamp=int(time.time()) - 301
    )
    malformed = await post_event(url(gateway), b"{not json", SIGNING_SECRET)
    oversized = await post_event(url(gateway), event_callback("x" * 5000), SIGNING_SECRET)
    async with aiohttp.ClientSession() as session, session.post(url(gateway), data=b"{}") as resp:
        unsigned = resp.status
    assert [forged[0], stale[0], malformed[0], oversized[0], unsigned] == [401, 401, 400, 413, 401]
    assert "signature" in forged[1]
    assert "window" in stale[1]
    # Signed and fresh, but U1 is not paired: a pairing challenge instead of a run.
    assert (await post_event(url(gateway), payload, SIGNING_SECRET))[0] == 200
    posts = await eventually(lambda: slack.posts, what="pairing challenge")
    assert "nexus pair approve" in posts[0].text
    challenges = await eventually(lambda: channel_events(bus, "pairing_requested"), what="event")
    code = challenges[0].event.code  # type: ignore[attr-defined]
    assert code in posts[0].text
    assert await run_requests(bus) == []
    counts = gateway.metrics.counts
    assert counts["inbound", "slack", "forged"] == 2
    assert counts["inbound", "slack", "stale"] == 1
    assert counts["inbound", "slack", "malformed"] == 1
    assert counts["inbound", "slack", "oversized"] == 1
    assert counts["inbound", "slack", "unpaired"] == 1


async def test_url_verification_answers_the_challenge(gateway: GatewayApp) -> None:
    status, body = await post_event(
        url(gateway), {"type": "url_verification", "challenge": "c-123"}, SIGNING_SECRET
    )
    assert status == 200
    assert "c-123" in body


async def test_a_failed_run_reports_its_reason_and_429_is_waited_out(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    slack.rate_limit(2, retry_after=1)
    ts = "1700000400.000100"
    await post_event(url(gateway), event_callback("<@UBOT> run x: y", ts=ts), SIGNING_SECRET)
    requests = await eventually(lambda: run_requests(bus), what="run requested")
    run_id = requests[0].address.run_id
    assert run_id is not None
    await bus.publish(
        subjects.run_event(run_id, "failed"),
        RunFailed(reason="budget_exceeded", message="tokens over 100000"),
    )
    thread = await eventually(
        lambda: (t := slack.thread("C1", ts)) and len(t) >= 2 and t, within=30, what="posts"
    )
    assert slack.rate_limited_calls == 2
    assert len(thread) == 2
    assert "budget_exceeded" in thread[1]
    assert "tokens over 100000" in thread[1]
    assert gateway.metrics.counts["send", "slack", "rate_limited"] >= 1


async def test_approval_is_relayed_with_a_short_id_and_answered_from_slack(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    ts = "1700000500.000100"
    await post_event(url(gateway), event_callback("<@UBOT> run ops: deploy", ts=ts), SIGNING_SECRET)
    run_id = (await eventually(lambda: run_requests(bus), what="requested"))[0].address.run_id
    assert run_id is not None
    await bus.publish(
        subjects.run_event(run_id, "approval_requested"),
        ApprovalRequested(
            approval_id="apr-1",
            tool="shell",
            summary="rm -rf build",
            expires_at=datetime.now(UTC) + timedelta(minutes=5),
        ),
    )
    relayed = await eventually(lambda: channel_events(bus, "approval_relayed"), what="relayed")
    short = relayed[0].event.short_id  # type: ignore[attr-defined]
    asked = await eventually(
        lambda: [t for t in slack.thread("C1", ts) if f"yes {short}" in t], what="approval posted"
    )
    assert "rm -rf build" in asked[0]
    # Slack and the CLI answer at the same moment: exactly one decision reaches the run.
    slack_answer = post_event(
        url(gateway),
        event_callback(
            f"<@UBOT> yes {short}", ts="1700000501.000100", thread_ts=ts, event_id="Ev-yes"
        ),
        SIGNING_SECRET,
    )
    cli_answer = cli_decides(bus, run_id, "apr-1", "deny")
    (status, _), cli_won = await asyncio.gather(slack_answer, cli_answer)
    assert status == 200
    decisions = await eventually(lambda: inbox_of(bus, run_id), what="a decision")
    told = await eventually(
        lambda: [t for t in slack.thread("C1", ts) if "Approved" in t or "already decided" in t],
        what="the Slack answer's reply",
    )
    assert len(await inbox_of(bus, run_id)) == 1
    decision = decisions[0].event
    assert isinstance(decision, ApprovalDecision)
    if cli_won:
        assert (decision.decision, decision.surface) == ("deny", "cli")
        assert "already decided: deny by alice via cli." in told[0]
    else:
        assert (decision.decision, decision.surface) == ("approve", "slack")
        assert told[0].startswith("Approved")

    # A later answer from Slack is told it is already decided, and changes nothing.
    def told_decided() -> int:
        return sum("already decided" in t for t in slack.thread("C1", ts))

    before = told_decided()
    await post_event(
        url(gateway),
        event_callback(
            f"<@UBOT> no {short}", ts="1700000502.000100", thread_ts=ts, event_id="Ev-no"
        ),
        SIGNING_SECRET,
    )
    await eventually(lambda: told_decided() == before + 1, what="late answer told")
    assert len(await inbox_of(bus, run_id)) == 1


async def test_a_reply_in_the_run_thread_goes_to_the_run_inbox(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    ts = "1700000600.000100"
    await post_event(url(gateway), event_callback("<@UBOT> run a: b", ts=ts), SIGNING_SECRET)
    run_id = (await eventually(lambda: run_requests(bus), what="requested"))[0].address.run_id
    assert run_id is not None
    reply = event_callback(
        "<@UBOT> also update the changelog", ts="1700000601.000100", thread_ts=ts, event_id="E2"
    )
    assert (await post_event(url(gateway), reply, SIGNING_SECRET))[0] == 200
    messages = await eventually(lambda: inbox_of(bus, run_id), what="inbox message")
    message = messages[0].event
    assert isinstance(message, InboxMessage)
    assert (message.text, message.sender, message.channel) == (
        "also update the changelog",
        "slack:U1",
        "slack",
    )
    # Outside a run's thread the same words get the help line, not an inbox message.
    stray = event_callback("<@UBOT> hello", ts="1700000602.000100", event_id="E3")
    await post_event(url(gateway), stray, SIGNING_SECRET)
    await eventually(lambda: slack.thread("C1", "1700000602.000100"), what="help line")
    assert "run <agent>" in slack.thread("C1", "1700000602.000100")[0]
    assert len(await inbox_of(bus, run_id)) == 1


async def test_a_send_cut_mid_call_is_looked_up_before_it_is_posted_again(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    """What a kill during chat.postMessage leaves: the row says 'sending'. If Slack has the
    message (its metadata carries the key) it is not posted again; if not, it is posted."""
    from nexus_events.events import ChannelAddress

    from nexus_channel_gateway.platforms import SlackPoster
    from nexus_channel_gateway.replies import say

    store = gateway.store
    assert store is not None
    reached = SlackPoster(slack.token, slack.api_url)
    ts = await reached.post("C5", "1.1", "reached Slack before the kill", "key-reached")
    await store.mark_sending("key-reached")
    await store.mark_sending("key-lost")
    here = ChannelAddress(channel="slack", conversation="C5", thread="1.1")
    await say(bus, here, "reached Slack before the kill", key="key-reached", kind="notice")
    await say(bus, here, "never reached Slack", key="key-lost", kind="notice")
    outcomes = await eventually(
        lambda: _at_least(channel_events(bus, "sent"), 2), what="two outcomes"
    )
    by_key = {d.event.idempotency_key: d.event for d in outcomes}  # type: ignore[attr-defined]
    assert by_key["key-reached"].platform_message_id == ts
    assert by_key["key-lost"].status == "sent"
    assert slack.thread("C5", "1.1") == ["reached Slack before the kill", "never reached Slack"]


async def _at_least(coro: object, n: int) -> object:
    found = await coro  # type: ignore[misc]
    return found if len(found) >= n else None
