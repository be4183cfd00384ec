"""A budget ask (docs/spend.md) in chat, on real NATS + PostgreSQL and the fake Slack: its
approval on the ask's pseudo-run (no run request, no origin thread) goes to the approver
chats, a member of the ask's team decides it, anyone else is refused naming the team."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import RUNS
from nexus_events.events import ApprovalDecision, ApprovalRefused
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from nexus_testing.budget_asks import ASK_APPROVAL_ID, open_budget_ask
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.gateway import SIGNING_SECRET, channel_events, events, inbox_of, pair

from nexus_channel_gateway.app import GatewayApp

TEAMS = '{"alpha": ["slack:UALICE"]}'


def url(app: GatewayApp) -> str:
    return f"http://127.0.0.1:{app.port}/slack/events"


async def test_a_team_member_decides_a_budget_ask_from_the_approver_chat(
    bus: Bus, make_gateway: object, slack: FakeSlack
) -> None:
    gateway: GatewayApp = await make_gateway(channel_approvers="slack:CAPP", teams=TEAMS)  # type: ignore[operator]
    for user in ("UALICE", "UBOB"):
        await pair(bus, "slack", user)
        await eventually(lambda u=user: gateway.store.allowed("slack", u), what="paired")  # type: ignore[union-attr,misc]
    ask = await open_budget_ask(bus, approvers=["team:alpha"])

    relayed = await eventually(lambda: channel_events(bus, "approval_relayed"), what="relayed")
    assert [(d.event.run_id, d.event.conversation, d.event.thread) for d in relayed] == [  # type: ignore[attr-defined]
        (ask, "CAPP", None)
    ]
    short = relayed[0].event.short_id  # type: ignore[attr-defined]
    posts = await eventually(
        lambda: [p.text for p in slack.posts if p.channel == "CAPP" and p.thread_ts is None],
        what="asked in the approver chat",
    )
    assert posts[0].startswith(f"🔐 Budget ask `{ask}`: extend team:alpha's alpha-monthly by $10")
    assert f"yes {short}" in posts[0]

    # Bob is paired but not in team alpha: refused, told who may, recorded, nothing decided.
    bob = event_callback(
        f"<@UBOT> yes {short}", user="UBOB", channel="CAPP", ts="1700000901.000100", event_id="EB"
    )
    assert (await post_event(url(gateway), bob, SIGNING_SECRET))[0] == 200
    told = await eventually(lambda: slack.thread("CAPP", "1700000901.000100"), what="refusal")
    assert "You may not decide" in told[0]
    assert "team:alpha (slack:UALICE)" in told[0]
    refusals = await eventually(
        lambda: _refusals(bus, ask), what="the refusal recorded on the pseudo-run"
    )
    assert (refusals[0].answered_by, refusals[0].surface) == ("slack:UBOB", "slack")
    assert "team:alpha" in refusals[0].reason
    assert await inbox_of(bus, ask) == []

    alice = event_callback(
        f"<@UBOT> yes {short}", user="UALICE", channel="CAPP", ts="1700000902.000100", event_id="EA"
    )
    assert (await post_event(url(gateway), alice, SIGNING_SECRET))[0] == 200
    decisions = await eventually(lambda: inbox_of(bus, ask), what="the decision")
    decision = decisions[0].event
    assert isinstance(decision, ApprovalDecision)
    assert (decision.approval_id, decision.decision, decision.decided_by) == (
        ASK_APPROVAL_ID,
        "approve",
        "slack:UALICE",
    )


async def _refusals(bus: Bus, run_id: str) -> list[ApprovalRefused]:
    subject = subjects.run_event(run_id, RunEvent.APPROVAL_REFUSED)
    found = [d.event for d in await events(bus, RUNS, subject)]
    return [e for e in found if isinstance(e, ApprovalRefused)]
