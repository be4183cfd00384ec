"""The flow runs pages on a real core and the flows service run in-process: the list, one
flow run drawn on its pinned definition with each step's state and runs, live from the flow's
events, a waiting gate answerable in place, and the end of the flow shown as it happens."""

from __future__ import annotations

import html
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.events import ApprovalDecision, RunCompleted, RunResult
from nexus_events.events.flows import FlowRequested, FlowStatus, StepStatus
from nexus_events.transport.approvals import claim_approval
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_flow
from nexus_flows.app import FlowsApp
from nexus_flows.config import FlowsSettings
from nexus_testing.polling import eventually

from .conftest import OPERATE_TOKEN, READ_TOKEN, Browserless, Clients
from .flow_fixtures import AGENT_YAML, SHIP_FLOW, LiveFeed, since_of


@pytest.fixture
async def flows_service(bus: Bus, pg_pool: asyncpg.Pool[Any]) -> AsyncIterator[FlowsApp]:
    settings = FlowsSettings(
        health_port=None, timer_interval=0.1, fetch_timeout=0.2, catalog_retry=0.3,
        catalog_timeout=1.0,
    )  # fmt: skip
    app = FlowsApp(settings, bus=bus, pool=pg_pool)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def start_ship(bus: Bus, core: CoreApp, flow_run_id: str) -> None:
    await apply_agent(bus, AGENT_YAML)
    await apply_flow(bus, SHIP_FLOW)
    await eventually(core.catalog_fresh, what="catalog applied")
    requested = FlowRequested(flow="ship", task_id="t-1", input="go", requested_by="tester")
    await bus.publish(subjects.flow_event(flow_run_id, FlowRequested), requested)


async def page_when(client: Browserless, path: str, holds: str) -> str:
    async def get() -> tuple[int, str]:
        return await client.get(path)

    _, page = await eventually(
        get, lambda r: r[0] == 200 and holds in r[1], what=f"{path}: {holds}"
    )
    return str(page)


def nodes_in(page: str) -> dict[str, dict[str, Any]]:
    raw = page.split('data-graph="', 1)[1].split('"', 1)[0]
    return {n["id"]: n for n in json.loads(html.unescape(raw))["nodes"]}


async def finish_run(bus: Bus, run_id: str) -> None:
    done = RunCompleted(result=RunResult(summary="done", details={}))
    await bus.publish(subjects.run_event(run_id, RunCompleted), done, msg_id=f"t:{run_id}")


async def approve(bus: Bus, gate_run_id: str, approval_id: str) -> None:
    # As the console's approval action will: claim, then the decision on the gate's inbox.
    claim = await claim_approval(
        bus.js, gate_run_id, approval_id, "approve", decided_by="console:oper", surface="console"
    )
    assert claim.won
    decision = ApprovalDecision(approval_id=approval_id, decision="approve", decided_by="oper")
    await bus.publish(subjects.inbox(gate_run_id), decision)


async def test_a_flow_run_is_drawn_and_followed_live_to_its_end(
    bus: Bus, core: CoreApp, flows_service: FlowsApp, clients: Clients
) -> None:
    client = await clients()
    await client.login(OPERATE_TOKEN)
    await start_ship(bus, core, "fr-live")
    page = await page_when(client, "/flow-runs/fr-live", "fr-live-implement-r1")
    nodes = nodes_in(page)
    assert nodes["implement"]["state"] == StepStatus.RUNNING
    assert nodes["implement"]["run_ids"] == ["fr-live-implement-r1"]
    assert nodes["approve"]["state"] == "pending"
    assert '<a href="/runs/fr-live-implement-r1">' in page
    assert f'id="flow-status" class="status {FlowStatus.RUNNING}"' in page
    assert 'href="/flows/ship?revision=1"' in page

    feed_path = f"/live/flow-runs/fr-live?since={since_of(page)}"
    async with LiveFeed(client, feed_path) as feed:
        await finish_run(bus, "fr-live-implement-r1")
        done = json.dumps({
            "step": "implement", "state": StepStatus.SUCCEEDED,
            "classes": f"{StepStatus.SUCCEEDED} done", "round": 1, "run_id": "fr-live-implement-r1",
        })  # fmt: skip
        gate_form = 'action="/runs/fr-live-approve-r1/approvals/gate-approve-r1"'
        text = await feed.wait_for("event: step\nid: ", f"data: {done}", gate_form)
        assert '"step": "approve", "state": "waiting"' in text
        assert 'hx-swap-oob="beforeend:#gates"' in text
        assert "Ship it?" in text
        assert f'class="status {FlowStatus.WAITING}"' in text

        # The page rendered now shows the gate in place, its buttons live for an operator.
        waiting = await page_when(client, "/flow-runs/fr-live", gate_form)
        form = waiting.split(gate_form, 1)[1].split("</form>", 1)[0]
        assert 'value="approve"' in form
        assert "disabled" not in form

        await approve(bus, "fr-live-approve-r1", "gate-approve-r1")
        text = await feed.wait_for(
            f'id="flow-status" hx-swap-oob="true" class="status {FlowStatus.COMPLETED}"'
        )
        assert '<div id="gate-approve-r1" hx-swap-oob="delete">' in text
        assert '"step": "approve", "state": "running"' in text

    final = await page_when(client, "/flow-runs/fr-live", f"status {FlowStatus.COMPLETED}")
    nodes = nodes_in(final)
    assert nodes["implement"]["classes"] == f"{StepStatus.SUCCEEDED} done"
    assert nodes["approve"]["state"] == StepStatus.SUCCEEDED
    assert 'id="gates">\n</div>' in final  # nothing left to answer


async def test_a_readers_gate_buttons_are_disabled(
    bus: Bus, core: CoreApp, flows_service: FlowsApp, clients: Clients
) -> None:
    await start_ship(bus, core, "fr-read")
    reader = await clients()
    await reader.login(READ_TOKEN)
    await page_when(reader, "/flow-runs/fr-read", "fr-read-implement-r1")
    await finish_run(bus, "fr-read-implement-r1")
    gate_form = 'action="/runs/fr-read-approve-r1/approvals/gate-approve-r1"'
    page = await page_when(reader, "/flow-runs/fr-read", gate_form)
    form = page.split(gate_form, 1)[1].split("</form>", 1)[0]
    assert form.count("disabled") == 3  # comment, approve, deny
    assert 'title="your sign-in may only read"' in form


async def test_the_flow_runs_list_is_filtered_and_live(
    bus: Bus, core: CoreApp, flows_service: FlowsApp, clients: Clients
) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    await start_ship(bus, core, "fr-one")
    page = await page_when(client, "/flow-runs", 'id="flow-run-fr-one"')
    assert 'href="/flow-runs/fr-one"' in page
    status, other = await client.get("/flow-runs?flow=another")
    assert status == 200
    assert "fr-one" not in other.split('id="flow-runs-body"', 1)[1]
    status, bad = await client.get("/flow-runs?status=sideways")
    assert status == 400
    assert "status" in bad

    async with LiveFeed(client, f"/live/flow-runs?since={since_of(page)}") as feed:
        requested = FlowRequested(flow="ship", task_id="t-2", input="again")
        await bus.publish(subjects.flow_event("fr-two", FlowRequested), requested)
        await feed.wait_for('id="flow-run-fr-two"', 'hx-swap-oob="afterbegin:#flow-runs-body"')
        await finish_run(bus, "fr-one-implement-r1")
        await feed.wait_for(
            f'<span id="flow-status-fr-one" hx-swap-oob="true" class="status {FlowStatus.WAITING}"'
        )


async def test_an_unknown_flow_run_is_a_404_page(flows_service: FlowsApp, clients: Clients) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/flow-runs/no-such-run")
    assert status == 404
    assert "no-such-run" in html.unescape(page)
    status, _ = await client.get("/flow-runs/bad%20id")
    assert status == 404
