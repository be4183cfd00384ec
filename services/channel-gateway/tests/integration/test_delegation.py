"""Delegation on real NATS + PostgreSQL: a RouteRequest (what the runner's `delegate` tool
publishes) starts one child run with the parent's id and the correlation id, the child's
ending reaches the parent's inbox, and cycles and too-deep chains are refused."""

from __future__ import annotations

import asyncpg
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import INBOX
from nexus_events.events import InboxMessage, RouteRequest, RunCompleted, RunRequested
from nexus_events.events.dlq import DeadLetter
from nexus_events.events.runs import RunResult
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually
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


async def _settled(bus: Bus, stream: str, durable: str) -> bool:
    info = await bus.js.consumer_info(stream, durable)
    return (info.num_pending or 0) == 0 and (info.num_ack_pending or 0) == 0


async def test_a_malformed_route_both_readers_reject_is_one_dead_letter(
    bus: Bus, make_gateway: object, pg_dsn: str
) -> None:
    """Core's poison sweeper and the gateway's delegation durable both read
    agent.route.v1.<agent> and both reject a route without a correlation id: one stored
    message, one dead letter, whoever files it first (issue 36 defect 4)."""
    await make_gateway()  # type: ignore[operator]
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
    assert pool is not None
    settings = CoreSettings(health_port=0, memory_timeout=0.2, fetch_timeout=0.2)
    core = CoreApp(settings, bus=bus, pool=pool)
    await core.start()
    try:
        ack = await bus.js.publish(subjects.route("reviewer"), b'{"input": "no correlation id"}')

        async def letters() -> list[DeadLetter]:
            found = await dead_letters(bus)
            return [x for x in found if (x.stream, x.stream_seq) == (ack.stream, ack.seq)]

        await eventually(letters, what="the route dead-lettered")
        for durable in ("core_sweep_inbox", "channel_gateway_delegation"):
            await eventually(lambda d=durable: _settled(bus, INBOX, d), what=f"{durable} done")
        filed = await letters()
        assert len(filed) == 1, [(x.service, x.consumer) for x in filed]
        assert filed[0].reason == "invalid_event"
    finally:
        await core.stop()
        await pool.close()
