"""Plane drives a real run: `nexus dev up --offline-model` with plane-sync pointed at the fake
Plane (tests/fakes/plane.py, served from a thread), the real core, scheduler and runner.

A person labels a work item `agent:gatekeeper`; the run shows up on the work item, asks for an
approval there, is approved with a `/approve` comment, and its result lands on the item,
which moves to Done.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nexus_testing import eventually_blocking, free_port

from tests.e2e.conftest import RUN_WAIT, Stack
from tests.e2e.test_e2e import GATEKEEPER
from tests.fakes.plane import FakePlane
from tests.support import devstack

pytestmark = pytest.mark.timeout(240)

SECRET = "e2e-webhook-secret"
T = TypeVar("T")


class ThreadedPlane:
    """The fake Plane on its own event loop in a thread (the stack's CLI calls are blocking)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.plane = FakePlane()

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(30)

    def __enter__(self) -> ThreadedPlane:
        self.thread.start()
        self.call(self.plane.start)
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self.plane.settle)
        self.call(self.plane.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        # Closed here, not left to the garbage collector: an unclosed loop's self-pipe is
        # reported as an unraisable ResourceWarning in whichever later test collects it.
        self.loop.close()


@pytest.fixture(scope="module")
def plane() -> Iterator[ThreadedPlane]:
    with ThreadedPlane() as threaded:
        yield threaded


@pytest.fixture(scope="module")
def plane_stack(plane: ThreadedPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("plane-e2e")
    fake = plane.plane
    webhook_port = free_port()
    env = devstack.stack_env(
        tmp,
        {
            "NEXUS_PLANE_URL": fake.url,
            "NEXUS_PLANE_API_KEY": fake.api_key,
            "NEXUS_PLANE_WORKSPACE": fake.workspace,
            "NEXUS_PLANE_PROJECT_ID": fake.project_id,
            "NEXUS_PLANE_WEBHOOK_SECRET": SECRET,
            "NEXUS_PLANE_AGENT_RUNS": "off",
            "NEXUS_PLANE_RATE_PER_MINUTE": "6000",
            "NEXUS_WEBHOOK_HOST": "127.0.0.1",
            "NEXUS_WEBHOOK_PORT": str(webhook_port),
            "NEXUS_OUTBOX_POLL": "0.2",
            "NEXUS_HEARTBEAT_INTERVAL": "2",
        },
        drop=("NEXUS_", "OPENAI_"),
    )
    fake.add_webhook(f"http://127.0.0.1:{webhook_port}/webhooks/plane", SECRET)
    yield from devstack.running(Stack(tmp / ".nexus", tmp, env), "--offline-model")


def _comments(plane: ThreadedPlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.plane.comments_of(item)]


def test_a_labelled_work_item_runs_is_approved_from_a_comment_and_lands(
    plane: ThreadedPlane, plane_stack: Stack, tmp_path: Path
) -> None:
    stack = plane_stack
    assert "plane-sync" in stack.state()["services"]
    agent = tmp_path / "gatekeeper.yaml"
    agent.write_text(GATEKEEPER)
    assert stack.nexus("agents", "apply", "-f", str(agent)).code == 0

    async def create() -> str:
        return plane.plane.human_create_work_item("run it", labels=["agent:gatekeeper"])

    item = plane.call(create)
    asked = eventually_blocking(
        lambda: _comments(plane, item),
        lambda texts: any("/approve " in t for t in texts),
        within=RUN_WAIT,
    )
    assert "started working" in asked[0]
    found = re.search(r"/approve ([A-Za-z0-9_-]+)", next(t for t in asked if "/approve" in t))
    assert found is not None

    async def approve() -> str:
        return plane.plane.human_comment(item, f"/approve {found.group(1)} go ahead")

    plane.call(approve)
    done = plane.plane.state_named("Done")["id"]
    texts = eventually_blocking(
        lambda: _comments(plane, item),
        lambda texts: (
            any("Run completed" in t for t in texts)
            and plane.plane.work_items[item]["state"] == done
        ),
        within=RUN_WAIT,
    )
    result = next(t for t in texts if "Run completed" in t)
    assert "The approved command ran." in result
    status = eventually_blocking(
        lambda: stack.nexus("plane", "status", "-o", "json"),
        lambda r: r.code == 0 and r.json()["pending_writes"] == 0,
    )
    assert status.json()["mode"] == "comments"
    assert status.json()["failed_writes"] == 0
    assert len(plane.plane.work_items) == 1
