"""Approver chats (NEXUS_CHANNEL_APPROVERS) on real NATS + PostgreSQL and the fake Slack and
Telegram APIs: every approval request is posted there under one short id, once, is answered
there by a paired sender only, and the decision is announced there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.events import ApprovalDecided, ApprovalDecision, ApprovalRequested
from nexus_events.transport.approvals import claim_approval
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.fakes.telegram_api import FakeTelegram
from tests.support.gateway import SIGNING_SECRET, channel_events, inbox_of, pair, run_requests

from nexus_channel_gateway.app import GatewayApp

APPROVERS = "slack:CAPP,telegram:-1001"


def url(app: GatewayApp) -> str:
    return f"http://127.0.0.1:{app.port}/slack/events"


def asked(event_id: str = "apr-1") -> ApprovalRequested:
    return ApprovalRequested(
        approval_id=event_id,
        tool="shell",
        summary="kubectl rollout restart deploy/api",
        expires_at=datetime.now(UTC) + timedelta(minutes=5),
    )


def slack_top(slack: FakeSlack, channel: str) -> list[str]:
    return [p.text for p in slack.posts if p.channel == channel and p.thread_ts is None]


def telegram_chat(telegram: FakeTelegram, chat: str) -> list[str]:
    return [m.text for m in telegram.sent if m.chat_id == chat]


async def test_an_approval_of_a_run_not_from_chat_goes_to_every_approver_chat_once(
    bus: Bus, make_gateway: object, slack: FakeSlack, telegram: FakeTelegram
) -> None:
    gateway: GatewayApp = await make_gateway(channel_approvers=APPROVERS)  # type: ignore[operator]
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    run_id = "run_cron_1"  # e.g. started by a schedule: no origin chat
    await bus.publish(subjects.run_event(run_id, "approval_requested"), asked())
    # A redelivery of the same request (another copy at another stream position).
    await bus.publish(subjects.run_event(run_id, "approval_requested"), asked(), msg_id="again")
    relayed = await eventually(
        lambda: _at_least(channel_events(bus, "approval_relayed"), 2), what="relayed twice"
    )
    shorts = {d.event.short_id for d in relayed}  # type: ignore[attr-defined]
    assert len(shorts) == 1
    short = shorts.pop()
    assert {(d.address.ids["channel"], d.event.conversation) for d in relayed} == {  # type: ignore[attr-defined]
        ("slack", "CAPP"),
        ("telegram", "-1001"),
    }
    on_slack = await eventually(lambda: slack_top(slack, "CAPP"), what="asked on Slack")
    on_telegram = await eventually(lambda: telegram_chat(telegram, "-1001"), what="on Telegram")
    assert f"yes {short}" in on_slack[0]
    assert "kubectl rollout restart" in on_slack[0]
    assert f"yes {short}" in on_telegram[0]

    # Someone in the approver chat who is not paired is challenged; nothing is decided.
    stranger = event_callback(
        f"<@UBOT> yes {short}", user="U9", channel="CAPP", ts="1700000701.000100", event_id="E9"
    )
    assert (await post_event(url(gateway), stranger, SIGNING_SECRET))[0] == 200
    await eventually(
        lambda: slack.thread("CAPP", "1700000701.000100"), what="the stranger's challenge"
    )
    assert "nexus pair approve" in slack.thread("CAPP", "1700000701.000100")[0]
    assert await inbox_of(bus, run_id) == []

    # The paired approver answers in the approver chat: that decides it.
    answer = event_callback(
        f"<@UBOT> yes {short}", channel="CAPP", ts="1700000702.000100", event_id="E1"
    )
    assert (await post_event(url(gateway), answer, SIGNING_SECRET))[0] == 200
    decisions = await eventually(lambda: inbox_of(bus, run_id), what="the decision")
    decision = decisions[0].event
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by, decision.surface) == (
        "approve",
        "slack:U1",
        "slack",
    )
    reply = await eventually(lambda: slack.thread("CAPP", "1700000702.000100"), what="reply")
    assert reply[0].startswith("Approved")
    # A later answer from another surface is told it lost, and publishes nothing.
    late = await claim_approval(bus.js, run_id, "apr-1", "deny", decided_by="bob", surface="cli")
    assert (late.won, late.decision, late.decided_by) == (False, "approve", "slack:U1")

    # The runner's record of the decision is announced in every approver chat.
    await bus.publish(
        subjects.run_event(run_id, "approval_decided"),
        ApprovalDecided(
            approval_id="apr-1", decision="approved", decided_by="slack:U1", surface="slack"
        ),
    )
    await eventually(lambda: len(slack_top(slack, "CAPP")) >= 2, what="decided on Slack")
    await eventually(lambda: len(telegram_chat(telegram, "-1001")) >= 2, what="decided on Telegram")
    # Each chat was asked once (the redelivered request posted nothing more), then told.
    for posts in (slack_top(slack, "CAPP"), telegram_chat(telegram, "-1001")):
        assert sum(f"yes {short}" in p for p in posts) == 1
        assert posts[-1] == f"Approval {short} of run `{run_id}`: approved by slack:U1 via slack."
    assert len(await inbox_of(bus, run_id)) == 1
    assert len(await run_requests(bus)) == 0


async def test_a_chat_started_run_asks_in_its_thread_and_in_other_approver_chats(
    bus: Bus, make_gateway: object, slack: FakeSlack
) -> None:
    # C1 is both the origin's chat and an approver chat: its thread asks, its top level not.
    gateway: GatewayApp = await make_gateway(channel_approvers="slack:C1,slack:CAPP")  # type: ignore[operator]
    await pair(bus, "slack", "U1")
    await eventually(lambda: gateway.store.allowed("slack", "U1"), what="pairing applied")  # type: ignore[union-attr]
    ts = "1700000800.000100"
    await post_event(url(gateway), event_callback("<@UBOT> run ops: deploy", ts=ts), SIGNING_SECRET)
    run_id = (await eventually(lambda: run_requests(bus), what="requested"))[0].address.run_id
    assert run_id is not None
    await bus.publish(subjects.run_event(run_id, "approval_requested"), asked("apr-2"))
    in_thread = await eventually(
        lambda: [t for t in slack.thread("C1", ts) if "yes " in t], what="asked in the thread"
    )
    elsewhere = await eventually(lambda: slack_top(slack, "CAPP"), what="asked in CAPP")
    assert in_thread[0] == elsewhere[0]  # one short id, one text
    await bus.publish(
        subjects.run_event(run_id, "approval_decided"),
        ApprovalDecided(approval_id="apr-2", decision="denied", decided_by="alice", surface="cli"),
    )
    await eventually(lambda: len(slack_top(slack, "CAPP")) >= 2, what="decided in CAPP")
    await eventually(
        lambda: [t for t in slack.thread("C1", ts) if "denied by alice" in t], what="in thread"
    )
    assert slack_top(slack, "C1") == []
    assert "denied by alice via cli" in slack_top(slack, "CAPP")[1]


async def _at_least(coro: object, n: int) -> object:
    found = await coro  # type: ignore[misc]
    return found if len(found) >= n else None
