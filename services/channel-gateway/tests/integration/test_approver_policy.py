"""Only approvers approve (issue 30), on real NATS + PostgreSQL and the fake Slack and Telegram:
a paired sender who is not an approver of a run is refused wherever they answer (a DM, another
run's thread, an approver chat the agent's policy leaves out), told why, audited as
`approval_refused`, and nothing is claimed or decided; an approver's answer decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    ApprovalDecision,
    ApprovalRefused,
    ApprovalRequested,
    ModelSpec,
    Permissions,
    RunConfig,
    RunPrepared,
)
from nexus_events.transport.approvals import held_claim
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.fakes.telegram_api import FakeTelegram, post_update, update
from tests.support.gateway import (
    SIGNING_SECRET,
    TG_SECRET,
    channel_events,
    inbox_of,
    pair,
    run_requests,
)

from nexus_channel_gateway.app import GatewayApp

APPROVERS = "slack:CAPP,telegram:-1001"


def slack_url(app: GatewayApp) -> str:
    return f"http://127.0.0.1:{app.port}/slack/events"


def telegram_url(app: GatewayApp) -> str:
    return f"http://127.0.0.1:{app.port}/telegram/webhook"


async def refusals(bus: Bus, run_id: str) -> list[ApprovalRefused]:
    found = bus.replay(RUNS, filter_subject=subjects.run_events_filter(run_id, "approval_refused"))
    return [d.event async for d in found if isinstance(d.event, ApprovalRefused)]


async def ask(bus: Bus, run_id: str, approval_id: str) -> str:
    """The runner asks; returns the short id the gateway relayed it under."""
    await bus.publish(
        subjects.run_event(run_id, "approval_requested"),
        ApprovalRequested(
            approval_id=approval_id,
            tool="shell",
            summary="kubectl delete ns prod",
            expires_at=datetime.now(UTC) + timedelta(minutes=5),
        ),
    )

    async def relayed() -> str | None:
        for d in await channel_events(bus, "approval_relayed"):
            if d.event.run_id == run_id:  # type: ignore[attr-defined]
                return str(d.event.short_id)  # type: ignore[attr-defined]
        return None

    return await eventually(relayed, what=f"{approval_id} relayed")


async def slack_says(gateway: GatewayApp, text: str, **where: str) -> None:
    status, _ = await post_event(slack_url(gateway), event_callback(text, **where), SIGNING_SECRET)
    assert status == 200


async def start(gateway: GatewayApp, bus: Bus, user: str, ts: str) -> str:
    await slack_says(gateway, "<@UBOT> run ops: tidy up", user=user, ts=ts, event_id=f"E{ts}")

    async def mine() -> str | None:
        for d in await run_requests(bus):
            if d.event.requested_by == f"slack:{user}":  # type: ignore[attr-defined]
                return d.address.run_id
        return None

    return await eventually(mine, what=f"the run of {user}")


async def test_a_paired_non_approver_is_refused_everywhere_and_the_requester_decides(
    bus: Bus, make_gateway: object, slack: FakeSlack
) -> None:
    gateway: GatewayApp = await make_gateway(channel_approvers=APPROVERS)  # type: ignore[operator]
    for user in ("U1", "U2"):
        await pair(bus, "slack", user)
        await eventually(lambda u=user: gateway.store.allowed("slack", u), what="paired")  # type: ignore[misc]
    run_a = await start(gateway, bus, "U1", "1700001000.000100")  # U1 asks for run A in C1
    run_b = await start(gateway, bus, "U2", "1700001100.000100")  # U2 for run B
    short = await ask(bus, run_a, "apr-a")
    await eventually(lambda: slack.thread("C1", "1700001000.000100"), what="A's thread")

    # U2 is paired but no approver of A: a DM, their own run's thread; U1, A's requester, from
    # B's thread (the requester counts only in the thread the run was asked from).
    tries = [
        ("U2", {"channel": "D2", "kind": "message", "ts": "1700001201.000100"}),
        ("U2", {"channel": "C1", "thread_ts": "1700001100.000100", "ts": "1700001202.000100"}),
        ("U1", {"channel": "C1", "thread_ts": "1700001100.000100", "ts": "1700001203.000100"}),
    ]

    def refused_in(channel: str, thread: str) -> list[str]:
        return [p for p in slack.thread(channel, thread) if p.startswith("You may not decide")]

    for n, (user, where) in enumerate(tries, start=1):
        thread = where.get("thread_ts", where["ts"])
        before = len(refused_in(where["channel"], thread))
        await slack_says(gateway, f"<@UBOT> yes {short}", user=user, event_id=f"Ey{n}", **where)
        told = await eventually(
            lambda c=where["channel"], t=thread, b=before: refused_in(c, t)[b:],
            what=f"refusal {n}",
        )
        assert f"slack:{user} in slack:{where['channel']} is not an approver" in told[-1]
        assert "approver-chats (slack:CAPP,telegram:-1001), requester (slack:U1)" in told[-1]
    audit = await eventually(
        lambda: _at_least(refusals(bus, run_a), 3), what="three refusals recorded"
    )
    assert [(r.answered_by, r.where, r.decision) for r in audit] == [
        ("slack:U2", "slack:D2", "approve"),
        ("slack:U2", "slack:C1", "approve"),
        ("slack:U1", "slack:C1", "approve"),
    ]
    # Nothing was claimed or decided; the approval still waits.
    assert await held_claim(bus.js, run_a, "apr-a") is None
    assert await inbox_of(bus, run_a) == []
    assert await refusals(bus, run_b) == []
    assert gateway.metrics.counts["approval", "slack", "refused"] == 3
    assert gateway.metrics.counts["approval", "slack", "decided"] == 0

    # The requester in the run's own thread decides it.
    await slack_says(
        gateway, f"<@UBOT> no {short}", user="U1", channel="C1",
        thread_ts="1700001000.000100", ts="1700001204.000100", event_id="Ey4",
    )  # fmt: skip
    decisions = await eventually(lambda: inbox_of(bus, run_a), what="the requester's decision")
    decision = decisions[0].event
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by) == ("deny", "slack:U1")
    assert len(await refusals(bus, run_a)) == 3


async def test_the_agents_policy_leaves_out_an_approver_chat_and_an_allowed_approver_decides(
    bus: Bus, make_gateway: object, slack: FakeSlack, telegram: FakeTelegram
) -> None:
    gateway: GatewayApp = await make_gateway(channel_approvers=APPROVERS)  # type: ignore[operator]
    await pair(bus, "telegram", "77")
    await pair(bus, "slack", "U3")
    await eventually(lambda: gateway.store.allowed("slack", "U3"), what="paired")  # type: ignore[union-attr]
    await eventually(lambda: gateway.store.allowed("telegram", "77"), what="paired")  # type: ignore[union-attr]
    run_id = "run_prod_ops"
    # The agent definition names its approvers: only the Slack approver chat.
    config = RunConfig(
        run_id=run_id,
        agent_id="ops",
        system_prompt="You run production.",
        model=ModelSpec(name="m"),
        permissions=Permissions(approvers=["chat:slack:CAPP"]),
    )
    await bus.publish(subjects.run_event(run_id, "prepared"), RunPrepared(config=config))
    short = await ask(bus, run_id, "apr-p")
    # It is still asked in every approver chat; the Telegram one may not decide it.
    await eventually(lambda: [m for m in telegram.sent if m.chat_id == "-1001"], what="asked")
    answer = update(f"yes {short}", update_id=5, chat_id=-1001, user_id=77, message_id=50)
    assert (await post_update(telegram_url(gateway), answer, TG_SECRET))[0] == 200
    told = await eventually(
        lambda: [m.text for m in telegram.sent if m.text.startswith("You may not decide")],
        what="the refusal on Telegram",
    )
    assert "telegram:77 in telegram:-1001 is not an approver of this run" in told[0]
    assert "the agent's policy allows: chat:slack:CAPP" in told[0]
    audit = await eventually(lambda: refusals(bus, run_id), what="refusal recorded")
    assert (audit[0].answered_by, audit[0].surface, audit[0].where) == (
        "telegram:77",
        "telegram",
        "telegram:-1001",
    )
    assert await held_claim(bus.js, run_id, "apr-p") is None
    assert await inbox_of(bus, run_id) == []

    # Anyone paired in the Slack approver chat may: U3 decides.
    await slack_says(
        gateway, f"<@UBOT> yes {short}", user="U3", channel="CAPP", ts="1700002000.000100"
    )
    decisions = await eventually(lambda: inbox_of(bus, run_id), what="the decision")
    decision = decisions[0].event
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by, decision.surface) == (
        "approve",
        "slack:U3",
        "slack",
    )
    claim = await held_claim(bus.js, run_id, "apr-p")
    assert claim is not None
    assert claim.told() == "approve by slack:U3 via slack"


async def _at_least(coro: object, n: int) -> object:
    found = await coro  # type: ignore[misc]
    return found if len(found) >= n else None


async def test_a_telegram_requester_decides_from_their_private_chat(
    bus: Bus, make_gateway: object, telegram: FakeTelegram
) -> None:
    # Telegram has no threads: the requester's own chat with the bot is their run's place.
    gateway: GatewayApp = await make_gateway()  # type: ignore[operator]
    await pair(bus, "telegram", "7")
    await eventually(lambda: gateway.store.allowed("telegram", "7"), what="paired")  # type: ignore[union-attr]
    asked = update("run ops: restart the worker", update_id=1, chat_id=7, user_id=7, message_id=10)
    assert (await post_update(telegram_url(gateway), asked, TG_SECRET))[0] == 200
    run_id = (await eventually(lambda: run_requests(bus), what="requested"))[0].address.run_id
    assert run_id is not None
    short = await ask(bus, run_id, "apr-t")
    await eventually(
        lambda: [m for m in telegram.sent if m.chat_id == "7" and f"yes {short}" in m.text],
        what="asked in the private chat",
    )
    answer = update(f"yes {short}", update_id=2, chat_id=7, user_id=7, message_id=12)
    assert (await post_update(telegram_url(gateway), answer, TG_SECRET))[0] == 200
    decisions = await eventually(lambda: inbox_of(bus, run_id), what="the decision")
    decision = decisions[0].event
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by) == ("approve", "telegram:7")
    assert await refusals(bus, run_id) == []
