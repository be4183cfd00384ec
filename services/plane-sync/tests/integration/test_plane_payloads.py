"""Plane's own webhook payloads (tests/fixtures/plane_webhooks, written from makeplane/plane's
source) driven through plane-sync end to end on real NATS + PostgreSQL, and the fake Plane
held to the same shapes key by key."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from nexus_events.contract.codec import Decoded
from nexus_events.events import (
    ApprovalDecision,
    CancelRequested,
    Column,
    InboxMessage,
    RunRequested,
    TaskCreated,
    TaskMoved,
    TaskUpdated,
)
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.http import LocalHttpServer
from tests.fakes.plane import HUMAN, FakePlane
from tests.support.plane_sync import ask_approval, inbox, run_events, start_run, task_events

from nexus_plane_sync.app import PlaneSyncApp
from nexus_plane_sync.webhooks import PATH

FIXTURES = Path(__file__).parents[1] / "fixtures" / "plane_webhooks"
SECRET = b"whsec-test"


def fixture(name: str, **values: str) -> dict[str, Any]:
    text = (FIXTURES / name).read_text()
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    body: dict[str, Any] = json.loads(text)
    return body


async def post(sync: PlaneSyncApp, payload: dict[str, Any]) -> None:
    """Send `payload` as Plane does: json.dumps of it, signed, with Plane's headers."""
    assert sync.webhooks is not None
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Autopilot",
        "X-Plane-Delivery": str(uuid.uuid4()),
        "X-Plane-Event": payload["event"],
        "X-Plane-Signature": hmac.new(SECRET, body, hashlib.sha256).hexdigest(),
    }
    url = f"http://127.0.0.1:{sync.webhooks.port}{PATH}"
    async with httpx.AsyncClient() as client:
        answer = await client.post(url, content=body, headers=headers)
    assert answer.status_code == 200, answer.text


def ids(plane: FakePlane, item: str) -> dict[str, str]:
    return {
        "work_item": item,
        "actor": HUMAN["id"],
        "workspace": plane.workspace_id,
        "project": plane.project_id,
        "webhook": str(uuid.uuid4()),
        "comment": str(uuid.uuid4()),
        "state_todo": plane.state_named("Todo")["id"],
        "state_done": plane.state_named("Done")["id"],
        "label_agent": plane.label("agent:coder")["id"],
        "label_backend": plane.label("backend")["id"],
        "approval": "ap-1",
    }


async def running_item(bus: Bus, plane: FakePlane) -> tuple[str, str]:
    """A work item labelled agent:coder, its run started: (work item id, run id)."""
    item = plane.human_create_work_item("Fix the flaky test", labels=["agent:coder", "backend"])
    [requested] = await eventually(lambda: run_events(bus, "requested"), what="run requested")
    assert requested.address.run_id is not None
    await start_run(bus, requested.address.run_id)
    return item, requested.address.run_id


async def task_event(bus: Bus, name: str, count: int = 1) -> list[Decoded]:
    async def found() -> list[Decoded] | None:
        got = [d for d in await task_events(bus) if d.address.event == name]
        return got if len(got) >= count else None

    result: list[Decoded] = await eventually(found, what=f"{count} task {name}")
    return result


async def test_plane_work_item_payloads_edit_the_task_and_steer_runs(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item, run_id = await running_item(bus, plane)
    values = ids(plane, item)
    task_id = f"plane-{item}"

    await post(sync, fixture("issue_updated_name.json", **values))
    [renamed] = await task_event(bus, "updated")
    assert isinstance(renamed.event, TaskUpdated)
    assert renamed.event.title == "Fix the flaky test for good"
    assert renamed.event.updated_by == "plane:ada"

    await post(sync, fixture("issue_updated_description_html.json", **values))
    described = (await task_event(bus, "updated", 2))[1]
    assert isinstance(described.event, TaskUpdated)
    assert described.event.description == "it fails one run in five"

    await post(sync, fixture("issue_updated_state_id.json", **values))
    [moved] = await task_event(bus, "moved")
    assert isinstance(moved.event, TaskMoved)
    assert moved.event.column is Column.DONE
    assert moved.address.ids["task_id"] == task_id
    # The board: plane-sync's mirror applied the edits to the task.
    assert sync.store is not None
    store = sync.store

    async def board() -> Any:
        row = await store.task(task_id)
        return row if row is not None and row["col"] == "done" else None

    row = await eventually(board, what="the task on the board, moved and renamed")
    assert (row["title"], row["description"]) == (
        "Fix the flaky test for good", "it fails one run in five",
    )  # fmt: skip

    await post(sync, fixture("issue_updated_label_ids.json", **values))
    [cancel] = await eventually(lambda: run_events(bus, "cancel_requested"), what="cancel")
    assert cancel.address.run_id == run_id
    assert isinstance(cancel.event, CancelRequested)

    # A work item made in Plane with the agent: label asks for a run; deleting it cancels.
    fresh = str(uuid.uuid4())
    await post(sync, fixture("issue_created.json", **{**values, "work_item": fresh}))

    async def second_run() -> list[Decoded] | None:
        runs = [d for d in await run_events(bus, "requested") if d.address.run_id != run_id]
        return runs or None

    [request] = await eventually(second_run, what="a run for the new work item")
    assert isinstance(request.event, RunRequested)
    assert request.event.task_id == f"plane-{fresh}"
    assert "one run in ten" in request.event.input
    created = [
        d.event for d in await task_events(bus) if d.address.ids["task_id"] == f"plane-{fresh}"
    ]
    assert isinstance(created[0], TaskCreated)
    assert created[0].title == "Fix the flaky test"
    await post(sync, fixture("issue_deleted.json", **{**values, "work_item": fresh}))
    cancels = await eventually(
        lambda: _at_least(run_events(bus, "cancel_requested"), 2), what="the second cancel"
    )
    assert cancels[1].address.run_id == request.address.run_id


async def test_plane_comment_payloads_reach_the_run_and_answer_its_approval(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item, run_id = await running_item(bus, plane)
    await ask_approval(bus, run_id, "ap-1")
    values = ids(plane, item)

    await post(sync, fixture("issue_comment_created.json", **values))
    [message] = await eventually(lambda: inbox(bus, run_id), what="the comment in the inbox")
    assert isinstance(message, InboxMessage)
    assert (message.text, message.sender, message.sender_kind) == (
        "please also update the docs", "ada", "human",
    )  # fmt: skip

    approve = fixture("issue_comment_created_approve.json", **values)
    approve["data"]["id"] = str(uuid.uuid4())
    await post(sync, approve)
    received = await eventually(lambda: _at_least(inbox(bus, run_id), 2), what="the decision")
    decision = received[1]
    assert isinstance(decision, ApprovalDecision)
    assert (decision.approval_id, decision.decision, decision.comment) == (
        "ap-1", "approve", "go ahead",
    )  # fmt: skip
    assert (decision.surface, decision.decided_by) == ("plane", "ada")

    # An edited or deleted comment makes no command: counted as ignored, by reason.
    await post(sync, fixture("issue_comment_updated.json", **values))
    await post(sync, fixture("issue_comment_deleted.json", **values))
    hooks = sync.metrics.webhooks
    await eventually(
        lambda: hooks["ignored:comment_updated"] == hooks["ignored:comment_deleted"] == 1,
        what="the edit and the deletion counted as ignored",
    )
    assert len(await inbox(bus, run_id)) == 2


async def _at_least(read: Any, n: int) -> list[Any] | None:
    found = await read
    return found if len(found) >= n else None


def _keys(value: Any) -> Any:
    """The shape of a JSON value: its keys, recursively (a list by its first element)."""
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys(value[0])] if value and isinstance(value[0], dict) else "list"
    return "value"


async def test_the_fake_plane_sends_the_recorded_shapes_signed_one_per_field() -> None:
    got: list[tuple[dict[str, str], bytes]] = []

    async def receive(request: web.Request) -> web.Response:
        got.append((dict(request.headers), await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", receive)
    server = LocalHttpServer()
    await server.serve(app)
    try:
        async with FakePlane() as plane:
            plane.add_webhook(f"{server.url}/hook", "s3cret")
            item = plane.human_create_work_item("t", labels=["agent:coder", "backend"])
            await plane.settle()
            plane.human_update(item, name="t2")
            await plane.settle()
            plane.human_update(item, description_html="<p>more</p>")
            await plane.settle()
            plane.human_update(item, state=plane.state_named("Done")["id"])
            await plane.settle()
            plane.human_set_labels(item, ["backend"])
            await plane.settle()
            comment = plane.human_comment(item, "hello")
            await plane.settle()
            plane.human_edit_comment(comment, "hello again")
            await plane.settle()
            plane.human_delete_work_item(item)  # Plane sends no webhook for it
            await plane.settle()
    finally:
        await server.close()
    bodies = [json.loads(body) for _, body in got]
    recorded = [
        "issue_created.json", "issue_updated_name.json", "issue_updated_description_html.json",
        "issue_updated_state_id.json", "issue_updated_label_ids.json",
        "issue_comment_created.json", "issue_comment_updated.json",
    ]  # fmt: skip
    assert len(bodies) == len(recorded)
    for body, name in zip(bodies, recorded, strict=True):
        want = json.loads((FIXTURES / name).read_text())
        assert (body["event"], body["action"]) == (want["event"], want["action"]), name
        assert body["activity"]["field"] == want["activity"]["field"], name
        assert _keys(body) == _keys(want), name
    assert bodies[3]["data"]["state"]["name"] == "Done"
    assert len({h["X-Plane-Delivery"] for h, _ in got}) == len(got)
    for headers, body in got:
        assert headers["User-Agent"] == "Autopilot"
        want_signature = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        assert headers["X-Plane-Signature"] == want_signature
