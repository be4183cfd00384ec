"""plane-sync: mirror lag under 100 concurrent runs at Plane's rate limit, writes saved by
coalescing, and webhook ingress latency, each beside a baseline from the same run.

- Mirror lag: from a run event's JetStream time to the write it implies landing on the fake
  Plane (tests/fakes/plane.py), for 100 runs at once (started, 10 turns, completed each), with
  the fake's limit of 60 requests per window. The window is 1 s instead of Plane's 60 s (time
  scaled 60x, so the bench takes seconds, not minutes); plane-sync's bucket is set to the same
  60 per window. Baseline: one direct HTTP call to the same fake (the floor of any write).
- Coalescing: writes the events imply without coalescing vs writes made.
- Webhook ingress: signed POSTs to plane-sync's endpoint, answered once JetStream has the
  delivery; baseline: a raw acknowledged JetStream publish of the same size, same run.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import statistics
import time
import uuid
from typing import Any

import httpx
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS as RUNS_STREAM
from nexus_events.contract.streams import TASKS as TASKS_STREAM
from nexus_events.contract.streams import ensure_streams
from nexus_events.events import (
    PlaneWebhookReceived,
    RunCompleted,
    RunRequested,
    RunResult,
    RunStarted,
    RunTurn,
    TaskCreated,
)
from nexus_events.transport.bus import Bus, BusSettings
from nexus_plane_sync.app import PlaneSyncApp
from nexus_plane_sync.config import PlaneSyncSettings
from nexus_testing import free_port

from tests.fakes.plane import FakePlane

RUNS = 100
TURNS = 10
WINDOW_LIMIT = 60  # Plane's default requests per window and key
WINDOW = 1.0  # seconds: Plane's is 60; scaled 60x
WEBHOOKS = 500
SECRET = b"bench-secret"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _until(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench: {what} not reached within {within}s")
        await asyncio.sleep(0.05)


async def _pending(app: PlaneSyncApp) -> int:
    assert app.store is not None
    return (await app.store.counts()).get("pending", 0)


Row = tuple[str, float, str, float]


async def _mirror(bus: Bus, app: PlaneSyncApp, plane: FakePlane) -> list[Row]:
    for n in range(RUNS):
        await bus.publish(
            subjects.task_event(f"bt-{n}", "created"), TaskCreated(title=f"bench task {n}")
        )
    await _until(lambda: _idle(bus, app), 120, "the work items")
    app.metrics.lags.clear()
    done_before = (await app.store.counts()).get("done", 0) if app.store else 0

    async def one(n: int) -> int:
        run = f"br-{n}"
        events: list[tuple[str, Any]] = [
            ("requested", RunRequested(agent_id="bench", task_id=f"bt-{n}")),
            ("started", RunStarted()),
            *((f"turn{t}", RunTurn(turn=t)) for t in range(1, TURNS + 1)),
            ("completed", RunCompleted(result=RunResult(summary="done", diff_stat="1 file"))),
        ]
        for name, event in events:
            subject = subjects.run_event(run, "turn" if name.startswith("turn") else name)
            await bus.publish(subject, event, msg_id=f"bench:{run}:{name}")
        # Writes implied without coalescing: started (comment + move), one progress edit per
        # turn, completed (comment + move).
        return 2 + TURNS + 2

    implied = sum(await asyncio.gather(*(one(n) for n in range(RUNS))))
    await _until(lambda: _idle(bus, app), 300, "the run writes")
    assert app.store is not None
    made = (await app.store.counts()).get("done", 0) - done_before
    lags = [x * 1000 for x in app.metrics.lags]

    async with httpx.AsyncClient(base_url=plane.url, headers={"X-API-Key": plane.api_key}) as c:
        plane.rate_limit = 1_000_000
        direct = []
        for _ in range(50):
            started = time.perf_counter()
            await c.get(f"/api/v1/workspaces/{plane.workspace}/projects/{plane.project_id}/states/")
            direct.append((time.perf_counter() - started) * 1000)
    base = statistics.median(direct)
    p50, p99 = _pct(lags, 0.5), _pct(lags, 0.99)
    saved = implied - made
    # The floor of the last write's lag: every write made, back to back at the limit.
    floor = made / WINDOW_LIMIT * WINDOW * 1000
    where = f"{RUNS} runs, {WINDOW_LIMIT}/window"
    return [
        (f"mirror lag p50, ms ({where})", p50, "drain at the limit", p50 / floor),
        (f"mirror lag p99, ms ({where})", p99, "drain at the limit", p99 / floor),
        ("drain at the limit (writes made / rate), ms", floor, "", 0.0),
        ("one direct Plane call (fake), ms", base, "", 0.0),
        ("writes implied by the run events", float(implied), "", 0.0),
        ("writes made (coalesced)", float(made), "implied", made / implied),
        ("writes saved by coalescing", float(saved), "implied", saved / implied),
        ("429s met", float(sum(1 for *_, s in plane.calls if s == 429)), "", 0.0),
    ]


async def _idle(bus: Bus, app: PlaneSyncApp) -> bool:
    """The mirror has read both streams to their end and the outbox is empty."""
    assert app.runner is not None
    for stream in (RUNS_STREAM, TASKS_STREAM):
        last = (await bus.js.stream_info(stream)).state.last_seq
        if app.runner.last_seq.get(stream, 0) < last:
            return False
    return await _pending(app) == 0


async def _ingress(bus: Bus, app: PlaneSyncApp) -> list[Row]:
    assert app.webhooks is not None
    url = f"http://127.0.0.1:{app.webhooks.port}/webhooks/plane"
    body = json.dumps(
        {
            "event": "issue_comment",
            "action": "create",
            "data": {"id": "c", "issue": str(uuid.uuid4()), "comment_html": "<p>hi</p>"},
            "activity": {"actor": {"id": "someone"}},
        }
    ).encode()
    sig = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    http = []
    async with httpx.AsyncClient() as client:
        for _ in range(WEBHOOKS):
            headers = {
                "X-Plane-Event": "issue_comment", "X-Plane-Delivery": str(uuid.uuid4()),
                "X-Plane-Signature": sig,
            }  # fmt: skip
            started = time.perf_counter()
            response = await client.post(url, content=body, headers=headers)
            http.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.text
    # The baseline publishes the same filed event (ignored by plane-sync's consumer: a comment
    # on a work item without a run) with the bus's encoding done once, outside the timing.
    filed = bus.encode(
        subjects.plane_event("bench", "webhook_received"),
        PlaneWebhookReceived(
            delivery_id="raw", event="issue_comment", action="create",
            data=json.loads(body)["data"], received_at=time.time(),
        ),
    )  # fmt: skip
    raw = []
    for _ in range(WEBHOOKS):
        headers = {**filed.headers, "Nats-Msg-Id": str(uuid.uuid4())}
        started = time.perf_counter()
        await bus.js.publish(filed.subject, filed.body, headers=headers)
        raw.append((time.perf_counter() - started) * 1000)
    h50, h99, r50, r99 = _pct(http, 0.5), _pct(http, 0.99), _pct(raw, 0.5), _pct(raw, 0.99)
    return [
        ("webhook ingress p50 to JetStream ack, ms", h50, "raw publish p50", h50 / r50),
        ("webhook ingress p99 to JetStream ack, ms", h99, "raw publish p99", h99 / r99),
        ("raw JetStream publish p99, ms", r99, "", 0.0),
    ]


async def run(nats_url: str, dsn: str) -> list[Row]:
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-plane"), source="bench")
    await ensure_streams(bus.js)
    try:
        async with FakePlane(rate_limit=WINDOW_LIMIT, rate_window=WINDOW) as plane:
            settings = PlaneSyncSettings(
                database_url=dsn, plane_url=plane.url, plane_api_key=plane.api_key,
                plane_workspace=plane.workspace, plane_project_id=plane.project_id,
                plane_webhook_secret=SECRET.decode(), plane_agent_runs="off",
                plane_bot_user_id=plane.bot["id"],
                plane_rate_per_minute=WINDOW_LIMIT * 60 / WINDOW, plane_burst=1,
                webhook_host="127.0.0.1", webhook_port=free_port(), health_port=None,
                outbox_poll=0.2, fetch_timeout=0.2,
            )  # fmt: skip
            app = PlaneSyncApp(settings, bus=bus)
            await app.start()
            try:
                rows = await _mirror(bus, app, plane)
                rows += await _ingress(bus, app)
            finally:
                await app.stop()
    finally:
        await bus.close()
    return rows
