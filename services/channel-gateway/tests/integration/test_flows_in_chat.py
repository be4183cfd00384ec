"""Flows in chat, on real NATS + PostgreSQL and the fake Slack: `flow <id>: <input>` starts a
flow that answers in its thread, the flow's progress and its gate are posted there once, and
`yes <id>` answers the gate under the gate's approver policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS, RUNS
from nexus_events.events import (
    ApprovalDecision,
    ApprovalRefused,
    Event,
    FlowAccepted,
    FlowDefinition,
    FlowRequested,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
    Origin,
)
from nexus_events.transport.approvals import held_claim
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.gateway import SIGNING_SECRET, events, inbox_of, pair

from nexus_channel_gateway.app import GatewayApp

TS = "1700005000.000100"


async def _says(gateway: GatewayApp, text: str, **where: str) -> None:
    url = f"http://127.0.0.1:{gateway.port}/slack/events"
    status, _ = await post_event(url, event_callback(text, **where), SIGNING_SECRET)
    assert status == 200


async def _requested(bus: Bus) -> tuple[str, FlowRequested]:
    async def found() -> list[tuple[str, FlowRequested]]:
        got = await events(bus, FLOWS, subjects.flow_events_filter(event="requested"))
        return [(d.address.ids["flow_run_id"], d.event) for d in got]  # type: ignore[misc]

    [(flow_run_id, request)] = await eventually(found, what="the flow requested")
    return flow_run_id, request


async def _publish(bus: Bus, flow_run_id: str, name: str, event: Event, tag: str = "") -> None:
    await bus.publish(
        subjects.flow_event(flow_run_id, name), event, msg_id=f"t:{flow_run_id}:{name}:{tag}"
    )


def _definition(approvers: list[str]) -> FlowDefinition:
    return FlowDefinition.model_validate(
        {
            "id": "feature",
            "steps": [
                {"id": "review", "kind": "run", "agent": "reviewer"},
                {"id": "ship", "kind": "gate", "summary": "Ship it?", "approvers": approvers},
            ],
        }
    )


async def _start(gateway: GatewayApp, bus: Bus, slack: FakeSlack) -> str:
    for user in ("U1", "U2"):
        await pair(bus, "slack", user)
        await eventually(lambda u=user: gateway.store.allowed("slack", u), what="paired")  # type: ignore[misc, union-attr]
    await _says(gateway, "<@UBOT> flow feature: do X", user="U1", ts=TS, event_id="Eflow")
    flow_run_id, request = await _requested(bus)
    assert request.flow == "feature"
    assert request.input == "do X"
    assert request.origin is Origin.CHANNEL
    assert request.requested_by == "slack:U1"
    assert request.reply_to is not None
    assert (request.reply_to.channel, request.reply_to.thread) == ("slack", TS)
    await eventually(
        lambda: any("requested" in t for t in slack.thread("C1", TS)), what="the request line"
    )
    return flow_run_id


async def _gate(bus: Bus, slack: FakeSlack, flow_run_id: str, approval_id: str) -> str:
    """The flows service stops at the gate; returns the short id the thread was told."""
    await _publish(
        bus,
        flow_run_id,
        "waiting",
        FlowWaiting(
            step="ship",
            kind="gate",
            summary="Ship it?",
            approval_id=approval_id,
            gate_run_id=f"{flow_run_id}-ship-r1",
            until=datetime.now(UTC) + timedelta(hours=1),
        ),
    )

    def asked() -> list[str]:
        return [t for t in slack.thread("C1", TS) if "waits at gate" in t]

    [text] = await eventually(asked, what="the gate in the thread")
    assert "Ship it?" in text
    short = text.split("`yes ")[1].split("`")[0]
    assert f"`no {short}`" in text
    return short


async def test_a_chat_flow_reports_its_steps_and_its_gate_is_answered_with_yes(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    flow_run_id = await _start(gateway, bus, slack)
    await _publish(
        bus,
        flow_run_id,
        "accepted",
        FlowAccepted(flow="feature", revision=1, definition=_definition([])),
    )
    started = FlowStepStarted(step="review", kind="run", agent_id="reviewer")
    await _publish(bus, flow_run_id, "step_started", started)
    await _publish(bus, flow_run_id, "step_started", started, tag="again")  # re-published
    await _publish(
        bus,
        flow_run_id,
        "step_finished",
        FlowStepFinished(step="review", status="succeeded", output={"verdict": "approve"}),
    )
    short = await _gate(bus, slack, flow_run_id, "gate-1")
    thread = slack.thread("C1", TS)
    assert len([t for t in thread if "step `review`" in t and "started" in t]) == 1
    assert any("verdict `approve`" in t for t in thread)

    # U1 asked for the flow: in its thread, the requester decides (the default policy).
    await _says(
        gateway,
        f"<@UBOT> yes {short}",
        user="U1",
        ts="1700005001.000100",
        thread_ts=TS,
        event_id="Eyes",
    )
    gate_run_id = f"{flow_run_id}-ship-r1"
    [decision] = await eventually(lambda: inbox_of(bus, gate_run_id), what="the gate's decision")
    assert isinstance(decision.event, ApprovalDecision)
    assert (decision.event.approval_id, decision.event.decision) == ("gate-1", "approve")
    assert decision.event.decided_by == "slack:U1"
    claim = await held_claim(bus.js, gate_run_id, "gate-1")
    assert claim is not None
    assert claim.surface == "slack"

    # The gate resumes; a late answer claims nothing and is told what became of it.
    await _publish(
        bus, flow_run_id, "resumed", FlowResumed(step="ship", by="approved", decided_by="slack:U1")
    )
    await eventually(
        lambda: any("gate `ship` approved" in t for t in slack.thread("C1", TS)),
        what="the decision line",
    )
    await _says(
        gateway, f"no {short}", user="U1", ts="1700005009.000100", thread_ts=TS, event_id="Elate"
    )
    told = await eventually(
        lambda: [t for t in slack.thread("C1", TS) if "no longer waits" in t],
        what="the late answer told",
    )
    assert "approve by slack:U1 via slack" in told[0]
    assert len(await inbox_of(bus, gate_run_id)) == 1


async def test_a_gate_with_its_own_approvers_refuses_the_requester(
    bus: Bus, gateway: GatewayApp, slack: FakeSlack
) -> None:
    flow_run_id = await _start(gateway, bus, slack)
    definition = _definition(["slack:U2"])
    await _publish(
        bus,
        flow_run_id,
        "accepted",
        FlowAccepted(flow="feature", revision=1, definition=definition),
    )
    short = await _gate(bus, slack, flow_run_id, "gate-2")
    gate_run_id = f"{flow_run_id}-ship-r1"
    await _says(
        gateway, f"yes {short}", user="U1", ts="1700005002.000100", thread_ts=TS, event_id="Eu1"
    )

    async def refusals() -> list[ApprovalRefused]:
        got = await events(bus, RUNS, subjects.run_events_filter(gate_run_id, "approval_refused"))
        return [d.event for d in got if isinstance(d.event, ApprovalRefused)]

    [refusal] = await eventually(refusals, what="U1 refused")
    assert "slack:U2" in refusal.reason
    assert await held_claim(bus.js, gate_run_id, "gate-2") is None
    # The gate's own approver decides.
    await _says(
        gateway, f"no {short}", user="U2", ts="1700005003.000100", thread_ts=TS, event_id="Eu2"
    )
    [decision] = await eventually(lambda: inbox_of(bus, gate_run_id), what="U2 decided")
    assert isinstance(decision.event, ApprovalDecision)
    assert (decision.event.decision, decision.event.decided_by) == ("deny", "slack:U2")
