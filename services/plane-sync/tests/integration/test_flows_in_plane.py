"""Flows on Plane, end to end on real NATS + PostgreSQL with the fake Plane: a `flow:` label
starts a flow on the work item's task, the flow's progress shows on the item once, and a
`/approve` comment answers a flow gate under the gate's approver policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS, INBOX, PLANE, RUNS
from nexus_events.events import (
    ApprovalDecision,
    ApprovalRefused,
    Event,
    FlowAccepted,
    FlowCompleted,
    FlowDefinition,
    FlowRequested,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
    Origin,
    PlaneWebhookReceived,
)
from nexus_events.transport.approvals import held_claim
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import HUMAN, FakePlane
from tests.support.plane_sync import events

from nexus_plane_sync.app import PlaneSyncApp


def _definition(approvers: list[str] | None = None) -> FlowDefinition:
    return FlowDefinition.model_validate(
        {
            "id": "feature",
            "steps": [
                {"id": "review", "kind": "run", "agent": "reviewer"},
                {
                    "id": "ship",
                    "kind": "gate",
                    "summary": "Ship it?",
                    "approvers": approvers or [],
                },
            ],
        }
    )


async def _flow_requests(bus: Bus) -> list[tuple[str, FlowRequested]]:
    found = await events(bus, FLOWS, subjects.flow_events_filter(event="requested"))
    return [(d.address.ids["flow_run_id"], d.event) for d in found]  # type: ignore[misc]


async def _requested_one(bus: Bus) -> tuple[str, FlowRequested]:
    async def check() -> list[tuple[str, FlowRequested]]:
        return await _flow_requests(bus)

    [(flow_run_id, request)] = await eventually(check, what="the flow requested")
    return flow_run_id, request


async def _publish(bus: Bus, flow_run_id: str, name: str, event: Event, tag: str = "") -> None:
    await bus.publish(
        subjects.flow_event(flow_run_id, name), event, msg_id=f"t:{flow_run_id}:{name}:{tag}"
    )


def _texts(plane: FakePlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.comments_of(item)]


async def test_a_flow_label_requests_the_flow_once(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item(
        "Add dark mode", labels=["flow:feature"], description_html="<p>for the settings page</p>"
    )
    flow_run_id, request = await _requested_one(bus)
    assert request.flow == "feature"
    assert request.task_id == f"plane-{item}"
    assert request.origin is Origin.PLANE
    assert request.requested_by == HUMAN["display_name"]
    assert "Add dark mode" in request.input
    assert "settings page" in request.input
    assert request.labels == {"plane_work_item": item}
    # No run was asked for: `flow:` is not `agent:`.
    assert not await events(bus, RUNS, subjects.run_events_filter(event="requested"))

    # The same delivery handled again (a redelivery after a crash, its label state lost):
    # the ingress asks again, under the same id, and JetStream keeps one request.
    [filed] = [
        d
        for d in await events(bus, PLANE, subjects.plane_events_filter(event="webhook_received"))
        if isinstance(d.event, PlaneWebhookReceived) and d.event.data.get("id") == item
    ]
    assert sync.store is not None
    await sync.store.pool.execute(f"DELETE FROM {sync.store.q}.seen_labels")
    ack = await bus.publish(filed.envelope.subject, filed.event, msg_id="t:refiled")

    async def handled() -> bool:
        info = await bus.js.consumer_info(PLANE, f"{sync.settings.consumer_prefix}_webhooks")
        return info.ack_floor.stream_seq >= ack.seq

    await eventually(handled, what="the delivery handled again")
    # Handled as new (its labels seen again), so it asked for the flow again: deduplicated.
    seen = await sync.store.pool.fetchval(f"SELECT count(*) FROM {sync.store.q}.seen_labels")
    assert seen == 1
    assert [fid for fid, _ in await _flow_requests(bus)] == [flow_run_id]


async def test_flow_progress_shows_once_and_a_comment_answers_its_gate(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Add dark mode", labels=["flow:feature"])
    flow_run_id, _ = await _requested_one(bus)
    gate_run_id, approval_id = f"{flow_run_id}-ship-r1", "gate-ship-1"
    run_id = f"{flow_run_id}-review-r1"
    until = datetime.now(UTC) + timedelta(hours=1)
    progress: list[tuple[str, Event]] = [
        ("accepted", FlowAccepted(flow="feature", revision=1, definition=_definition())),
        (
            "step_started",
            FlowStepStarted(step="review", kind="run", run_id=run_id, agent_id="reviewer"),
        ),
        (
            "step_finished",
            FlowStepFinished(
                step="review",
                status="succeeded",
                run_id=run_id,
                output={"verdict": "approve"},
                summary="Looks good.",
            ),
        ),
        (
            "waiting",
            FlowWaiting(
                step="ship",
                kind="gate",
                summary="Ship it?",
                approval_id=approval_id,
                gate_run_id=gate_run_id,
                until=until,
            ),
        ),
    ]
    for name, event in progress:
        await _publish(bus, flow_run_id, name, event)
    # The flows service re-publishing a step's start (a restart past the dedupe window).
    await _publish(bus, flow_run_id, "step_started", progress[1][1], tag="again")

    def flow_comments() -> list[str]:
        return [t for t in _texts(plane, item) if flow_run_id in t]

    await eventually(lambda: len(flow_comments()) >= 3, what="the flow's comments")
    started, finished, gate = flow_comments()
    assert "review" in started
    assert "reviewer" in started
    assert "approve" in finished
    assert "Looks good." in finished
    assert "Ship it?" in gate
    assert f"/approve {approval_id}" in gate
    assert f"/deny {approval_id}" in gate

    plane.human_comment(item, f"/approve {approval_id} ship it")

    async def decisions() -> list[Any]:
        found = await events(bus, INBOX, subjects.inbox(gate_run_id))
        return [d.event for d in found]

    [decision] = await eventually(decisions, what="the gate's decision")
    assert isinstance(decision, ApprovalDecision)
    assert (decision.approval_id, decision.decision, decision.comment) == (
        approval_id, "approve", "ship it",
    )  # fmt: skip
    assert decision.decided_by == HUMAN["display_name"]
    claim = await held_claim(bus.js, gate_run_id, approval_id)
    assert claim is not None
    assert (claim.decision, claim.surface) == ("approve", "plane")

    await _publish(bus, flow_run_id, "completed", FlowCompleted())
    await eventually(lambda: any("completed" in t for t in flow_comments()), what="the flow's end")
    await plane.settle()
    assert len(flow_comments()) == 4  # started, finished, gate, completed: each once

    # A late answer on the closed gate claims nothing and is told what became of it.
    plane.human_comment(item, f"/deny {approval_id}")
    [told] = await eventually(
        lambda: [t for t in _texts(plane, item) if "no longer waits" in t],
        what="the late answer told",
    )
    assert "approve by ada via plane" in told
    claim = await held_claim(bus.js, gate_run_id, approval_id)
    assert claim is not None
    assert claim.decision == "approve"
    assert len(await decisions()) == 1


async def test_a_gate_with_its_own_approvers_refuses_others(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Risky change", labels=["flow:feature"])
    flow_run_id, _ = await _requested_one(bus)
    gate_run_id, approval_id = f"{flow_run_id}-ship-r1", "gate-ship-2"
    definition = _definition(approvers=["plane:user:boss@example.com"])
    await _publish(
        bus,
        flow_run_id,
        "accepted",
        FlowAccepted(flow="feature", revision=1, definition=definition),
    )
    await _publish(
        bus,
        flow_run_id,
        "waiting",
        FlowWaiting(
            step="ship",
            kind="gate",
            summary="Ship?",
            approval_id=approval_id,
            gate_run_id=gate_run_id,
        ),
    )
    await eventually(
        lambda: any(f"/approve {approval_id}" in t for t in _texts(plane, item)),
        what="the gate on the work item",
    )
    # Ada asked for the flow, but the gate names its approvers: she is not one of them.
    plane.human_comment(item, f"/approve {approval_id}")

    async def refused() -> list[Any]:
        found = await events(bus, RUNS, subjects.run_events_filter(gate_run_id, "approval_refused"))
        return [d.event for d in found]

    [refusal] = await eventually(refused, what="the refusal recorded")
    assert isinstance(refusal, ApprovalRefused)
    assert "boss@example.com" in refusal.reason
    await eventually(
        lambda: any("You may not decide" in t for t in _texts(plane, item)),
        what="the refusal told on the work item",
    )
    assert await held_claim(bus.js, gate_run_id, approval_id) is None
    assert not await events(bus, INBOX, subjects.inbox(gate_run_id))
