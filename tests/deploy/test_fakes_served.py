"""`python -m tests.fakes`, as compose's fake-plane and fake-slack run it (make compose-test):
a real process on a given port; a person's work item reaches the webhook signed as Plane
signs, and is read back through Plane's API; Slack's Web API answers with the token; SIGTERM
stops the process cleanly (exit 0: as a container's PID 1 it must not need a SIGKILL)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from aiohttp import web
from nexus_testing import eventually, free_port

from tests.fakes.http import LocalHttpServer

from .compose_model import ROOT

SECRET = "served-webhook-secret"
KEY = "served-plane-key"


@asynccontextmanager
async def served(*args: str) -> AsyncIterator[str]:
    """The fake as a process on a free port, its URL; stopped with SIGTERM, it exits 0."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes", "--port", str(port), *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert f"serving on http://127.0.0.1:{port}" in line.decode()
        yield f"http://127.0.0.1:{port}"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_served_plane_sends_a_persons_work_item_signed_and_answers_its_api() -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/webhooks/plane", hook)
    receiver = LocalHttpServer()
    await receiver.serve(app)
    try:
        hook_url = f"{receiver.url}/webhooks/plane"
        args = ("plane", f"--api-key={KEY}", "--project-id=p-served",
                f"--webhook={hook_url}", f"--webhook-secret={SECRET}")  # fmt: skip
        async with served(*args) as url, httpx.AsyncClient(base_url=url) as client:
            person = {"name": "say hello", "labels": ["agent:hello"]}
            refused = await client.post("/_fake/human/work-items", json=person)
            assert refused.status_code == 401  # the API key, as every route of the fake
            made = await client.post(
                "/_fake/human/work-items", json=person, headers={"X-API-Key": KEY}
            )
            assert made.status_code == 201
            item = made.json()["id"]
            await eventually(lambda: received, what="the webhook")
            headers, body = received[0]
            want = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            assert headers["X-Plane-Signature"] == want
            payload = json.loads(body)
            assert (payload["event"], payload["action"]) == ("issue", "created")
            assert payload["data"]["id"] == item
            assert [label["name"] for label in payload["data"]["labels"]] == ["agent:hello"]
            assert payload["activity"]["actor"]["display_name"] == "ada"  # a person, no echo
            got = await client.get(
                f"/api/v1/workspaces/nexus/projects/p-served/work-items/{item}/",
                headers={"X-API-Key": KEY},
            )
            assert got.json()["name"] == "say hello"

            async def deliveries() -> list[dict[str, object]]:
                got = await client.get("/_fake/deliveries", headers={"X-API-Key": KEY})
                return list(got.json())

            sends = await eventually(deliveries, what="the delivery recorded")
            assert [(d["event"], d["status"]) for d in sends] == [("issue", 200)]
    finally:
        await receiver.close()


async def test_served_slack_answers_with_its_token_and_records_posts() -> None:
    async with (
        served("slack", "--token=xoxb-served") as url,
        httpx.AsyncClient(base_url=f"{url}/api") as client,
    ):
        wrong = await client.post("/auth.test", headers={"Authorization": "Bearer nope"})
        assert wrong.json()["error"] == "invalid_auth"
        auth = {"Authorization": "Bearer xoxb-served"}
        posted = await client.post(
            "/chat.postMessage",
            json={"channel": "C1", "text": "hi", "thread_ts": "1.1"},
            headers=auth,
        )
        assert posted.json()["ok"] is True
        thread = await client.get(
            "/conversations.replies", params={"channel": "C1", "ts": "1.1"}, headers=auth
        )
        assert [m["text"] for m in thread.json()["messages"]] == ["hi"]
