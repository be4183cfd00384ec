"""Delegation on real NATS + PostgreSQL: a RouteRequest (what the runner's `delegate` tool
publishes) starts one child run with the parent's id and the correlation id, the child's
ending reaches the parent's inbox, and cycles and too-deep chains are refused."""

from __future__ import annotations

from nexus_events import subjects
from nexus_events.bus import Bus
from nexus_events.codec import Decoded
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
    gateway = await make_gateway(delegation_max_depth=1)  # type: ignore[operator]
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
    # Another agent is fine for the cycle guard but one level too deep (limit 1).
    deep = RouteRequest(correlation_id="corr-3", input="test it", from_run_id=child_id)
    await bus.publish(subjects.route("tester"), deep)
    both = await eventually(lambda: _at_least(inbox_of(bus, child_id), 2), what="depth refused")
    assert "depth limit 1" in both[1].event.text  # type: ignore[attr-defined]
    assert len(await run_requests(bus)) == 1
    assert gateway.metrics.counts["delegation", "route", "refused"] == 2


async def _child_of(bus: Bus, correlation_id: str) -> Decoded | None:
    for found in await run_requests(bus):
        if found.event.labels.get("correlation_id") == correlation_id:  # type: ignore[attr-defined]
            return found
    return None


async def test_the_limit_counts_delegated_runs_below_the_root_whoever_names_the_sender(
    bus: Bus, make_gateway: object
) -> None:
    """NEXUS_DELEGATION_MAX_DEPTH=3 is three delegated runs below a root run, and the first
    child is at depth 1 whether or not the route request names its sender's agent."""
    gateway = await make_gateway(delegation_max_depth=3)  # type: ignore[operator]
    root = "run_root1"
    # The same first step twice: with and without the sender's agent.
    for corr, agent in (("d-named", "alpha"), ("d-anonymous", None)):
        await bus.publish(
            subjects.route("beta"),
            RouteRequest(correlation_id=corr, input="go", from_run_id=root, from_agent_id=agent),
        )
    firsts = [
        await eventually(lambda c=corr: _child_of(bus, c), what=f"child of {corr}")
        for corr in ("d-named", "d-anonymous")
    ]
    assert [f.event.labels["delegation_depth"] for f in firsts] == ["1", "1"]  # type: ignore[attr-defined]
    # Down the named chain: beta -> gamma -> delta are delegated runs 2 and 3.
    parent, depth = firsts[0].address.run_id, 1
    for corr, sender, target in (("d-2", "beta", "gamma"), ("d-3", "gamma", "delta")):
        await bus.publish(
            subjects.route(target),
            RouteRequest(correlation_id=corr, input="go", from_run_id=parent, from_agent_id=sender),
        )
        child = await eventually(lambda c=corr: _child_of(bus, c), what=f"child {target}")
        depth += 1
        assert child.event.labels["delegation_depth"] == str(depth)  # type: ignore[attr-defined]
        parent = child.address.run_id
    assert parent is not None
    # A fourth delegated run is one too many.
    await bus.publish(
        subjects.route("epsilon"),
        RouteRequest(correlation_id="d-4", input="go", from_run_id=parent, from_agent_id="delta"),
    )
    refused = await eventually(lambda: inbox_of(bus, parent), what="fourth refused")
    assert "depth limit 3 reached: alpha -> beta -> gamma -> delta -> epsilon" in (
        refused[0].event.text  # type: ignore[attr-defined]
    )
    assert len(await run_requests(bus)) == 4
    assert gateway.metrics.counts["delegation", "route", "refused"] == 1
