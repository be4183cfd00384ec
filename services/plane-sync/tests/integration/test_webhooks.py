"""The webhook endpoint: forged, malformed and repeated deliveries are refused or ignored,
counted, and nothing is filed twice."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid

import httpx
from _pytest.logging import LogCaptureFixture
from nexus_events.events import RunRequested
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually
from tests.fakes.plane import HUMAN, FakePlane
from tests.support.plane_sync import MakeSync, nexus_cli, plane_events, run_events

from nexus_plane_sync.app import PlaneSyncApp
from nexus_plane_sync.webhooks import PATH

SECRET = b"whsec-test"


def _signed(body: bytes, secret: bytes = SECRET, delivery: str | None = None) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Plane-Event": "issue",
        "X-Plane-Delivery": delivery or str(uuid.uuid4()),
        "X-Plane-Signature": hmac.new(secret, body, hashlib.sha256).hexdigest(),
    }


def _issue(name: str, labels: list[str]) -> bytes:
    item = str(uuid.uuid4())
    return json.dumps(
        {
            "event": "issue",
            "action": "created",
            "webhook_id": "w",
            "workspace_id": "ws",
            "data": {"id": item, "name": name, "labels": [{"name": n} for n in labels]},
            "activity": {"actor": HUMAN, "field": None},
        }
    ).encode()


async def test_forged_malformed_and_repeated_webhooks(bus: Bus, sync: PlaneSyncApp) -> None:
    assert sync.webhooks is not None
    url = f"http://127.0.0.1:{sync.webhooks.port}{PATH}"
    body = _issue("real", ["agent:coder"])
    async with httpx.AsyncClient() as client:
        forged = await client.post(url, content=body, headers=_signed(body, b"wrong"))
        unsigned = await client.post(url, content=body, headers={"X-Plane-Delivery": "d1"})
        tampered_headers = _signed(body)
        tampered = await client.post(url, content=body + b" ", headers=tampered_headers)
        junk = b"not json"
        not_json = await client.post(url, content=junk, headers=_signed(junk))
        no_delivery = {k: v for k, v in _signed(body).items() if k != "X-Plane-Delivery"}
        missing = await client.post(url, content=body, headers=no_delivery)
        headers = _signed(body, delivery="delivery-1")
        first = await client.post(url, content=body, headers=headers)
        again = await client.post(url, content=body, headers=headers)
    assert [forged.status_code, unsigned.status_code, tampered.status_code] == [401, 401, 401]
    assert not_json.status_code == 400
    assert missing.status_code == 400
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == {"duplicate": True}
    counters = sync.metrics.webhooks
    assert (counters["bad_signature"], counters["bad_request"]) == (3, 2)
    assert (counters["accepted"], counters["duplicate"]) == (1, 1)
    filed = await plane_events(bus, "webhook_received")
    assert [e.delivery_id for e in filed] == ["delivery-1"]
    await eventually(lambda: run_events(bus, "requested"), what="the one run requested")
    assert len(await run_events(bus, "requested")) == 1


async def test_a_replayed_delivery_is_ignored_after_a_restart(bus: Bus, make_sync: object) -> None:

    assert callable(make_sync)
    make: MakeSync = make_sync
    first: PlaneSyncApp = await make()
    assert first.webhooks is not None
    url = f"http://127.0.0.1:{first.webhooks.port}{PATH}"
    body = _issue("once", ["agent:coder"])
    headers = _signed(body, delivery="delivery-old")
    async with httpx.AsyncClient() as client:
        assert (await client.post(url, content=body, headers=headers)).status_code == 200
        await first.stop()
        second: PlaneSyncApp = await make()
        replay = await client.post(url, content=body, headers=headers)
    assert replay.json() == {"duplicate": True}
    assert second.metrics.webhooks["duplicate"] == 1
    assert len(await plane_events(bus, "webhook_received")) == 1


async def test_labels_given_as_ids_are_resolved_with_plane(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    assert sync.webhooks is not None
    label = plane.label("agent:reviewer")["id"]
    item = str(uuid.uuid4())
    body = json.dumps(
        {
            "event": "issue",
            "action": "created",
            "data": {"id": item, "name": "Review it", "labels": [label]},
            "activity": {"actor": HUMAN},
        }
    ).encode()
    async with httpx.AsyncClient() as client:
        url = f"http://127.0.0.1:{sync.webhooks.port}{PATH}"
        assert (await client.post(url, content=body, headers=_signed(body))).status_code == 200
    [requested] = await eventually(lambda: run_events(bus, "requested"), what="the run")
    assert isinstance(requested.event, RunRequested)
    assert requested.event.agent_id == "reviewer"
    assert requested.event.task_id == f"plane-{item}"


async def _post(sync: PlaneSyncApp, payload: dict[str, object]) -> None:
    assert sync.webhooks is not None
    body = json.dumps(payload).encode()
    headers = {**_signed(body), "X-Plane-Event": str(payload["event"])}
    url = f"http://127.0.0.1:{sync.webhooks.port}{PATH}"
    async with httpx.AsyncClient() as client:
        assert (await client.post(url, content=body, headers=headers)).status_code == 200


async def test_ignored_deliveries_are_counted_by_reason_and_kept_across_a_restart(
    bus: Bus, nats_url: str, plane: FakePlane, make_sync: MakeSync, caplog: LogCaptureFixture
) -> None:
    first: PlaneSyncApp = await make_sync()
    item = plane.human_create_work_item("No agent here", labels=["backend"])
    plane.human_comment(item, "anyone?")
    plane.human_update(item, priority="high")
    await plane.settle()
    activity = {"actor": HUMAN, "field": None}
    await _post(first, {"event": "cycle", "action": "created", "data": {"id": "c1"}})
    with caplog.at_level(logging.WARNING, logger="nexus_plane_sync.ingress"):
        archived = {"event": "issue", "action": "archived", "data": {"id": item}}
        await _post(first, {**archived, "activity": activity})
        # Unreadable: an issue without its id is dead-lettered (and counted).
        await _post(first, {"event": "issue", "action": "updated", "data": {"name": "x"}})
        want = {
            "ignored:no_trigger_label": 1, "ignored:comment_without_run": 1,
            "ignored:not_a_task": 1, "ignored:event_not_followed": 1,
            "ignored:unknown_action": 1, "unusable": 1, "accepted": 6,
        }  # fmt: skip

        def counted() -> bool:
            return all(first.metrics.webhooks[k] == n for k, n in want.items())

        await eventually(counted, what="every delivery counted")
    assert any("unknown_action" in r.getMessage() for r in caplog.records)
    assert any("dead-lettered" in r.getMessage() for r in caplog.records)
    [letter] = await dead_letters(bus)
    assert letter.reason == "invalid_webhook"

    async def status() -> dict[str, int]:
        answer = await nexus_cli(nats_url, "plane", "status", "-o", "json")
        assert answer.exit_code == 0, answer.output
        hooks: dict[str, int] = json.loads(answer.stdout)["webhooks"]
        return hooks

    assert (await status()).items() >= want.items()
    # A restart keeps the totals (PostgreSQL), and the table lists the ignored by reason.
    await first.stop()
    await make_sync()
    assert (await status()).items() >= want.items()
    table = await nexus_cli(nats_url, "plane", "status")
    text = " ".join(table.stdout.split())  # the table wraps long cells
    assert "webhooks ignored comment_without_run 1, event_not_followed 1," in text
    assert "unknown_action 1" in text


async def test_a_redelivered_webhook_is_counted_once(sync: PlaneSyncApp) -> None:
    store = sync.store
    assert store is not None
    assert await store.first_delivery("d-once")
    assert await store.count_webhooks({"ignored:test": 1, "messages_test": 2}, "d-once")
    assert not await store.count_webhooks({"ignored:test": 1}, "d-once")  # redelivered
    assert await store.count_webhooks({"ignored:test": 1}, "d-pruned-or-never-recorded")
    counts = await store.webhook_counts()
    assert (counts["ignored:test"], counts["messages_test"]) == (2, 2)
