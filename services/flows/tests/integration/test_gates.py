"""Gates: the loop cap escalating to a gate, and gates approved, denied and expired."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import ApprovalDecided, ApprovalDecision, ApprovalRequested, RunRequested
from nexus_events.events.flows import FlowCancelRequested
from nexus_events.transport.approvals import claim_approval
from nexus_testing import eventually

from .conftest import Env, EnvFactory
from .harness import feature_flow, flow, get_flow, request_flow, stored, wait_status


async def answer(env: Env, gate_run_id: str, approval_id: str, decision: str, who: str) -> None:
    # As a surface does: claim first, then publish the decision on the gate's inbox.
    claim = await claim_approval(
        env.bus.js, gate_run_id, approval_id, decision, decided_by=who, surface="cli"
    )
    assert claim.won
    await env.bus.publish(
        subjects.inbox(gate_run_id),
        ApprovalDecision(approval_id=approval_id, decision=decision, decided_by=who, comment="ok"),
    )


async def test_loop_cap_escalates_to_the_gate_and_approval_grants_rounds(
    make_env: EnvFactory,
) -> None:
    def script(run_id: str, req: RunRequested) -> Any:
        step = req.labels["step"]
        if step == "review":
            # Changes asked in rounds 1-3; approved in round 4 (after the gate's extra rounds).
            if req.labels["round"] == "4":
                return {"verdict": "approve"}
            return {"verdict": "request_changes", "findings": [f"round {req.labels['round']}"]}
        return {"steps": ["x"], "_branch": "b"}

    env = await make_env([feature_flow()], script)
    await request_flow(env.bus, "g1", "feature", input="x")
    view = await wait_status(env.bus, "g1", "waiting")
    gate = view.steps[-1]
    assert (gate.step, gate.round, gate.status) == ("more_rounds", 1, "waiting")
    assert [s.round for s in view.steps if s.step == "implement"] == [1, 2, 3]
    gate_run_id = "g1-more_rounds-r1"
    asked = await stored(env.bus, RUNS, subjects.run_event(gate_run_id, "approval_requested"))
    assert len(asked) == 1
    assert isinstance(asked[0], ApprovalRequested)
    assert asked[0].tool == "flow_gate"
    assert "Another round" in asked[0].summary
    await answer(env, gate_run_id, asked[0].approval_id, "approve", "alice")
    view = await wait_status(env.bus, "g1", "completed")
    assert [s.round for s in view.steps if s.step == "implement"] == [1, 2, 3, 4]
    assert view.outputs["more_rounds"] == {"approved": True, "decided_by": "alice", "comment": "ok"}
    decided = await stored(env.bus, RUNS, subjects.run_event(gate_run_id, "approval_decided"))
    assert [d.decision for d in decided if isinstance(d, ApprovalDecided)] == ["approved"]


# Longer than any test runs: only the engine's clock moving expires these gates.
HOUR = 3600.0


def gate_flow(flow_id: str, **gate: Any) -> Any:
    return flow(
        {
            "id": flow_id,
            "steps": [
                {"id": "ask", "kind": "gate", "summary": "Ship {{ input }}?", **gate,
                 "next": [{"when": "ask.approved", "to": "ship"}]},
                {"id": "ship", "kind": "run", "agent": "shipper", "input": "ship"},
            ],
        }
    )  # fmt: skip


async def test_gate_denied_fails_the_flow(make_env: EnvFactory) -> None:
    env = await make_env([gate_flow("gated")], lambda run_id, req: {})
    await request_flow(env.bus, "g2", "gated", input="v1")
    view = await wait_status(env.bus, "g2", "waiting")
    assert view.steps[0].approval_id == "gate-ask-r1"
    await answer(env, "g2-ask-r1", "gate-ask-r1", "deny", "bob")
    view = await wait_status(env.bus, "g2", "failed")
    assert view.reason == "gate_denied"
    assert env.runner.requests == {}


async def test_gate_expires_with_its_default_and_a_late_answer_loses(make_env: EnvFactory) -> None:
    env = await make_env(
        [gate_flow("auto", expires_in=HOUR, default="approved")], lambda run_id, req: {}
    )
    await request_flow(env.bus, "g3", "auto", input="v2")
    await wait_status(env.bus, "g3", "waiting")
    env.clock.advance(HOUR + 60)
    view = await wait_status(env.bus, "g3", "completed")
    assert view.outputs["ask"]["approved"] is True
    assert list(env.runner.requests) == ["g3-ship-r1"]
    decided = await stored(env.bus, RUNS, subjects.run_event("g3-ask-r1", "approval_decided"))
    assert [d.decision for d in decided if isinstance(d, ApprovalDecided)] == ["expired"]
    late = await claim_approval(
        env.bus.js, "g3-ask-r1", "gate-ask-r1", "deny", decided_by="carol", surface="cli"
    )
    assert not late.won
    assert late.decision == "expired"


async def test_gate_expiry_denied_by_default(make_env: EnvFactory) -> None:
    env = await make_env([gate_flow("strict", expires_in=HOUR)], lambda run_id, req: {})
    await request_flow(env.bus, "g4", "strict", input="v3")
    await wait_status(env.bus, "g4", "waiting")
    env.clock.advance(HOUR + 60)
    view = await wait_status(env.bus, "g4", "failed")
    assert view.reason == "gate_denied"
    assert view.outputs["ask"]["approved"] is False
    assert await eventually(lambda: get_flow(env.bus, "g4"))


async def test_cancel_settles_a_waiting_gate(make_env: EnvFactory) -> None:
    env = await make_env([gate_flow("held")], lambda run_id, req: {})
    await request_flow(env.bus, "g5", "held", input="v4")
    await wait_status(env.bus, "g5", "waiting")
    await env.bus.publish(
        subjects.flow_event("g5", "cancel_requested"), FlowCancelRequested(requested_by="fay")
    )
    await wait_status(env.bus, "g5", "cancelled")
    decided = await eventually(
        lambda: stored(env.bus, RUNS, subjects.run_event("g5-ask-r1", "approval_decided")),
        what="the gate settled",
    )
    assert [(d.decision, d.decided_by) for d in decided] == [("expired", "fay")]
    # A late answer changes nothing: the flow stays cancelled, nothing runs.
    inbox = next(c for c in env.app.consumers if c.spec.durable.endswith("_inbox"))
    seen = inbox.processed
    await answer(env, "g5-ask-r1", "gate-ask-r1", "approve", "gus")
    await eventually(lambda: inbox.processed, lambda n: n > seen, what="the answer read")
    again = await stored(env.bus, RUNS, subjects.run_event("g5-ask-r1", "approval_decided"))
    assert len(again) == 1
    view = await get_flow(env.bus, "g5")
    assert view is not None
    assert view.status == "cancelled"
    assert env.runner.requests == {}
