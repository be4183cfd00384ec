"""Delegation on real NATS + PostgreSQL: a RouteRequest (what the runner's `delegate` tool
publishes) starts one child run with the parent's id and the correlation id, the child's
ending reaches the parent's inbox, and cycles and too-deep chains are refused."""

from __future__ import annotations

from nexus_events import subjects
from nexus_events.bus import Bus
from nexus_events.events import InboxMessage, RouteRequest, RunCompleted, RunRequested
from nexus_events.events.runs import RunResult
from nexus_events.testing import eventually
from tests.support.gateway import inbox_of, run_requests

PARENT = "run_parent1"


async def _at_least(coro: object, n: int) -> object:
    found = await coro  # type: ignore[misc]
    return found if len(found) >= n else None


async def test_a_delegation_runs_a_child_and_the_parent_gets_its_result(
    bus: Bus, make_gateway: object
) -> None:
    gateway = await make_gateway(delegation_max_depth=2)  # type: ignore[operator]
    request = RouteRequest(
        correlation_id="corr-1", input="review the diff", from_run_id=PARENT,
        from_agent_id="implementer", reply_to=PARENT,
    )  # fmt: skip
    await bus.publish(subjects.route("reviewer"), request)
    # The same request again (a retry of the tool under another message id): still one child.
    await bus.publish(subjects.route("reviewer"), request, msg_id="retry-1")
    requests = await eventually(lambda: run_requests(bus), what="child run requested")
    child = requests[0]
    assert isinstance(child.event, RunRequested)
    assert (child.event.agent_id, child.event.input) == ("reviewer", "review the diff")
    assert child.event.parent_run_id == PARENT
    assert child.event.labels["correlation_id"] == "corr-1"
    assert child.envelope.correlation_id == "corr-1"
    child_id = child.address.run_id
    assert child_id is not None

    await bus.publish(
        subjects.run_event(child_id, "completed"),
        RunCompleted(result=RunResult(summary="LGTM, one nit in auth.py")),
    )
    inbox = await eventually(lambda: inbox_of(bus, PARENT), what="result in parent inbox")
    result = inbox[0].event
    assert isinstance(result, InboxMessage)
    assert result.correlation_id == "corr-1"
    assert result.sender_kind == "agent"
    assert "LGTM, one nit in auth.py" in result.text
    assert child_id in result.text

    # The child delegates back to the parent's agent: a cycle, refused in the child's inbox.
    cycle = RouteRequest(
        correlation_id="corr-2", input="fix it", from_run_id=child_id, from_agent_id="reviewer"
    )
    await bus.publish(subjects.route("implementer"), cycle)
    refused = await eventually(lambda: inbox_of(bus, child_id), what="cycle refused")
    assert refused[0].event.correlation_id == "corr-2"  # type: ignore[attr-defined]
    assert "cycle: implementer -> reviewer -> implementer" in refused[0].event.text  # type: ignore[attr-defined]
    # Another agent is fine for the cycle guard but one level too deep (limit 2).
    deep = RouteRequest(correlation_id="corr-3", input="test it", from_run_id=child_id)
    await bus.publish(subjects.route("tester"), deep)
    both = await eventually(lambda: _at_least(inbox_of(bus, child_id), 2), what="depth refused")
    assert "depth limit 2" in both[1].event.text  # type: ignore[attr-defined]
    assert len(await run_requests(bus)) == 1
    assert gateway.metrics.counts["delegation", "route", "refused"] == 2
