"""Approvals from the console, on a real core, NATS and PostgreSQL: the page lists what waits
and who may decide; an operator's decision reaches the run's inbox as `console:<name>`; a read
viewer, a principal the policy leaves out, and a forged POST are refused (the first two
audited as `approval_refused`); a decided approval says who decided where; live rows."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.streams import INBOX, RUNS
from nexus_events.events import (
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRefused,
    ApprovalRequested,
    Origin,
    RunPrepared,
    RunRequested,
    RunStarted,
)
from nexus_events.events.flows import FlowRequested, FlowStatus
from nexus_events.transport.approvals import claim_approval, held_claim
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_flow
from nexus_events.transport.run_requests import request_run
from nexus_flows.app import FlowsApp
from nexus_testing.polling import eventually

from .conftest import OPERATE_TOKEN, READ_TOKEN, Browserless, Clients
from .flow_fixtures import AGENT_YAML, SHIP_FLOW
from .test_flow_runs_pages import finish_run, flows_service

__all__ = ["flows_service"]  # the flows service fixture, shared with the flow runs pages

AGENT = "id: {id}\nrole: devops\nmodel: {{name: test-model}}\nsystem_prompt: You {id}.\n"
GUARDED = AGENT + "permissions: {{approvers: [{approvers}]}}\n"


async def _waiting(bus: Bus, core: CoreApp, run_id: str, approvers: str) -> None:
    """A run of an agent whose policy is `approvers`, asking for approval ap1."""
    await apply_agent(bus, GUARDED.format(id=f"a{run_id[-1]}", approvers=approvers))
    await eventually(core.catalog_fresh, what="catalog applied")
    request = RunRequested(agent_id=f"a{run_id[-1]}", origin=Origin.CLI, requested_by="someone")
    await request_run(bus, run_id, request, source="t")
    await eventually(lambda: _events(bus, run_id, RunPrepared), bool, what="prepared")
    await bus.publish(subjects.run_event(run_id, RunStarted), RunStarted())
    asked = ApprovalRequested(
        approval_id="ap1",
        tool="shell",
        summary="rm -rf build/",
        expires_at=datetime.now(UTC) + timedelta(minutes=10),
    )
    await bus.publish(subjects.run_event(run_id, ApprovalRequested), asked)
    await eventually(lambda: _status(core, bus, run_id), lambda s: s, what="awaiting approval")


async def _status(core: CoreApp, bus: Bus, run_id: str) -> bool:
    reply = await bus.nc.request(
        subjects.CORE_RUNS_GET, json.dumps({"run_id": run_id}).encode(), timeout=5
    )
    return bool(json.loads(reply.data).get("status") == RunStatus.AWAITING_APPROVAL.value)


async def _events(bus: Bus, run_id: str, event: type) -> list[object]:
    found = bus.replay(RUNS, filter_subject=subjects.run_event(run_id, event))
    return [d.event async for d in found]


async def _inbox(bus: Bus, run_id: str) -> list[object]:
    return [d.event async for d in bus.replay(INBOX, filter_subject=subjects.inbox(run_id))]


async def _signed_in(clients: Clients, token: str) -> Browserless:
    client = await clients()
    await client.login(token)
    status, _ = await client.get("/approvals")
    assert status == 200
    return client


async def test_an_operator_decides_from_the_console_and_the_inbox_hears_console_name(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _waiting(bus, core, "run_c1", "'console:oper', 'nats:ops'")
    client = await _signed_in(clients, OPERATE_TOKEN)
    status, page = await client.get("/approvals")
    assert status == 200
    assert 'id="approval-run_c1-ap1"' in page
    assert "rm -rf build/" in page
    assert "console:oper, nats:ops" in page
    assert "disabled" not in page.split('id="approval-run_c1-ap1"', 1)[1].split("</tr>", 1)[0]

    status, text = await client.post(
        "/runs/run_c1/approvals/ap1",
        {"decision": "approve", "comment": "go ahead", "csrf": client.csrf},
    )
    assert status == 200, text
    assert "approve by console:oper" in text
    [decision] = await _inbox(bus, "run_c1")
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by, decision.surface, decision.comment) == (
        "approve",
        "console:oper",
        "console",
        "go ahead",
    )

    # A second answer learns who decided where, and publishes nothing.
    status, text = await client.post(
        "/runs/run_c1/approvals/ap1", {"decision": "deny", "csrf": client.csrf}
    )
    assert status == 409
    assert "already decided: approve by console:oper via console" in text
    assert len(await _inbox(bus, "run_c1")) == 1


async def test_a_read_viewers_post_is_refused_and_audited(
    bus: Bus, core: CoreApp, clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    await _waiting(bus, core, "run_c2", "'console:*'")
    client = await _signed_in(clients, READ_TOKEN)
    _, page = await client.get("/approvals")
    row = page.split('id="approval-run_c2-ap1"', 1)[1].split("</tr>", 1)[0]
    assert "disabled" in row

    status, text = await client.post(
        "/runs/run_c2/approvals/ap1", {"decision": "approve", "csrf": client.csrf}
    )
    assert status == 403
    assert "read-only console token" in text
    assert "refused POST approval ap1 of run run_c2 to console:reader" in caplog.text
    [refused] = await _events(bus, "run_c2", ApprovalRefused)
    assert isinstance(refused, ApprovalRefused)
    assert (refused.answered_by, refused.surface, refused.reason) == (
        "console:reader",
        "console",
        "read-only console token",
    )
    assert await held_claim(bus.js, "run_c2", "ap1") is None
    assert await _inbox(bus, "run_c2") == []


async def test_an_operator_the_policy_leaves_out_is_refused_and_told_why(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _waiting(bus, core, "run_c3", "'nats:ops'")
    client = await _signed_in(clients, OPERATE_TOKEN)
    status, text = await client.post(
        "/runs/run_c3/approvals/ap1", {"decision": "deny", "csrf": client.csrf}
    )
    assert status == 403
    assert "console:oper is not an approver of this run" in text
    [refused] = await _events(bus, "run_c3", ApprovalRefused)
    assert isinstance(refused, ApprovalRefused)
    assert (refused.answered_by, refused.decision) == ("console:oper", "deny")
    assert await _inbox(bus, "run_c3") == []


async def test_a_forged_post_without_csrf_publishes_nothing(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _waiting(bus, core, "run_c4", "'console:oper'")
    client = await _signed_in(clients, OPERATE_TOKEN)
    status, _ = await client.post("/runs/run_c4/approvals/ap1", {"decision": "approve"})
    assert status == 403
    assert await _events(bus, "run_c4", ApprovalRefused) == []
    assert await held_claim(bus.js, "run_c4", "ap1") is None
    assert await _inbox(bus, "run_c4") == []


async def test_decided_elsewhere_says_who_and_where(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _waiting(bus, core, "run_c5", "'console:oper'")
    await claim_approval(bus.js, "run_c5", "ap1", "deny", decided_by="slack:U1", surface="slack")
    client = await _signed_in(clients, OPERATE_TOKEN)
    status, text = await client.post(
        "/runs/run_c5/approvals/ap1", {"decision": "approve", "csrf": client.csrf}
    )
    assert status == 409
    assert "already decided: deny by slack:U1 via slack" in text
    assert await _inbox(bus, "run_c5") == []


async def test_bad_input_is_a_400_and_an_unknown_approval_a_404(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _waiting(bus, core, "run_c6", "'console:oper'")
    client = await _signed_in(clients, OPERATE_TOKEN)
    status, text = await client.post(
        "/runs/run_c6/approvals/ap1", {"decision": "maybe", "csrf": client.csrf}
    )
    assert status == 400
    assert "decision" in text
    status, _ = await client.post(
        "/runs/run_c6/approvals/nope", {"decision": "approve", "csrf": client.csrf}
    )
    assert status == 404
    assert await _inbox(bus, "run_c6") == []


async def test_a_new_approval_arrives_live_and_a_decided_one_leaves(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    client = await _signed_in(clients, READ_TOKEN)
    _, page = await client.get("/approvals")
    assert 'sse-connect="/live/approvals?since=' in page
    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []

    async def follow() -> None:
        url = f"{client.base}/live/approvals?since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            assert r.status == 200
            async for raw in r.content:
                received.append(raw.decode())
                if 'hx-swap-oob="delete"' in "".join(received):
                    return

    task = asyncio.create_task(follow())
    await _waiting(bus, core, "run_c7", "'console:oper'")
    status, row = await client.get("/approvals/run_c7/ap1/row")
    assert status == 200
    assert "rm -rf build/" in row
    operator = await _signed_in(clients, OPERATE_TOKEN)
    status, _ = await operator.post(
        "/runs/run_c7/approvals/ap1", {"decision": "deny", "csrf": operator.csrf}
    )
    assert status == 200
    # The runner would record the decision; this test's stands in for it.
    decided = ApprovalDecided(approval_id="ap1", decision="denied", decided_by="console:oper")
    await bus.publish(subjects.run_event("run_c7", ApprovalDecided), decided)
    await asyncio.wait_for(task, 20)
    text = "".join(received)
    assert 'hx-get="/approvals/run_c7/ap1/row"' in text
    assert 'id="approval-run_c7-ap1" hx-swap-oob="delete"' in text


GATED_SHIP = SHIP_FLOW.replace(
    'summary: "Ship it?"', 'summary: "Ship it?"\n    approvers: [console:oper]'
)


async def test_a_flow_gate_is_listed_and_answered_from_the_console(
    bus: Bus, core: CoreApp, flows_service: FlowsApp, clients: Clients
) -> None:
    await apply_agent(bus, AGENT_YAML)
    await apply_flow(bus, GATED_SHIP)
    await eventually(core.catalog_fresh, what="catalog applied")
    requested = FlowRequested(flow="ship", task_id="t-1", input="go", requested_by="tester")
    await bus.publish(subjects.flow_event("fr-g", FlowRequested), requested)
    await eventually(
        lambda: _events(bus, "fr-g-implement-r1", RunRequested), bool, what="step run requested"
    )
    await finish_run(bus, "fr-g-implement-r1")
    client = await _signed_in(clients, OPERATE_TOKEN)

    async def listed() -> str:
        return (await client.get("/approvals"))[1]

    page = await eventually(listed, lambda p: "gate-approve-r1" in p, what="gate listed")
    row = page.split('id="approval-fr-g-approve-r1-gate-approve-r1"', 1)[1].split("</tr>", 1)[0]
    assert "Ship it?" in row
    assert "console:oper" in row

    status, text = await client.post(
        "/runs/fr-g-approve-r1/approvals/gate-approve-r1",
        {"decision": "approve", "csrf": client.csrf},
    )
    assert status == 200, text
    [decision] = await _inbox(bus, "fr-g-approve-r1")
    assert isinstance(decision, ApprovalDecision)
    assert decision.decided_by == "console:oper"

    async def flow_status() -> str:
        _, page = await client.get("/flow-runs/fr-g")
        return page

    await eventually(
        flow_status, lambda p: f"status {FlowStatus.COMPLETED}" in p, what="flow completed"
    )
