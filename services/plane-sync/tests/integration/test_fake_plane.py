"""The fake Plane speaks Plane's API: plane-sdk's own (synchronous) client lists, creates and
updates against it, and it enforces what plane-sync relies on (409, 404, 401, 429, edition)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from plane.client import PlaneClient
from plane.errors.errors import HttpError
from plane.models.work_items import CreateWorkItem, CreateWorkItemComment, UpdateWorkItem
from tests.fakes.plane import ADMIN, GUEST, HUMAN, MEMBER, FakePlane


@pytest.fixture
async def plane() -> AsyncIterator[FakePlane]:
    async with FakePlane() as fake:
        yield fake


def _sdk(plane: FakePlane, key: str | None = None) -> PlaneClient:
    return PlaneClient(base_url=plane.url, api_key=key or plane.api_key)


async def test_plane_sdk_creates_lists_and_updates(plane: FakePlane) -> None:
    sdk = _sdk(plane)
    ws, project = plane.workspace, plane.project_id

    def work() -> tuple[str, list[str], str, int]:
        created = sdk.work_items.create(
            ws, project, CreateWorkItem(name="first", external_id="t1", external_source="nexus")
        )
        for i in range(3):
            sdk.work_items.create(ws, project, CreateWorkItem(name=f"more {i}"))
        assert created.id is not None
        done = plane.state_named("Done")["id"]
        sdk.work_items.update(ws, project, created.id, UpdateWorkItem(name="renamed", state=done))
        page = sdk.work_items.list(ws, project, {"per_page": 3})
        names = [r.name for r in page.results]  # type: ignore[attr-defined]
        second = sdk.work_items.list(ws, project, {"per_page": 3, "cursor": page.next_cursor})
        names += [r.name for r in second.results]  # type: ignore[attr-defined]
        sdk.work_items.comments.create(
            ws, project, created.id, CreateWorkItemComment(comment_html="<p>hi</p>")
        )
        states = sdk.states.list(ws, project)
        return created.id, names, page.next_cursor, len(states.results)  # type: ignore[attr-defined]

    item_id, names, cursor, n_states = await asyncio.to_thread(work)
    assert sorted(names) == ["more 0", "more 1", "more 2", "renamed"]
    assert cursor == "3:1:0"
    assert plane.work_items[item_id]["state"] == plane.state_named("Done")["id"]
    assert [c["comment_html"] for c in plane.comments_of(item_id)] == ["<p>hi</p>"]
    assert n_states == 5


async def test_duplicate_external_id_is_409_with_the_existing_id(plane: FakePlane) -> None:
    sdk = _sdk(plane)
    body = CreateWorkItem(name="x", external_id="t1", external_source="nexus")
    first = await asyncio.to_thread(sdk.work_items.create, plane.workspace, plane.project_id, body)
    with pytest.raises(HttpError) as err:
        await asyncio.to_thread(sdk.work_items.create, plane.workspace, plane.project_id, body)
    assert err.value.status_code == 409
    assert err.value.response["id"] == first.id  # type: ignore[index]
    async with httpx.AsyncClient(base_url=plane.url, headers={"X-API-Key": plane.api_key}) as c:
        base = f"/api/v1/workspaces/{plane.workspace}/projects/{plane.project_id}/work-items/"
        found = await c.get(base, params={"external_id": "t1", "external_source": "nexus"})
        missing = await c.get(base, params={"external_id": "t2", "external_source": "nexus"})
    assert found.json()["id"] == first.id
    assert missing.status_code == 404


async def test_wrong_key_is_401_and_the_rate_limit_is_429_as_plane_answers(
    plane: FakePlane,
) -> None:
    plane.rate_limit = 3
    async with httpx.AsyncClient(base_url=plane.url) as c:
        bad = await c.get("/api/v1/users/me/", headers={"X-API-Key": "nope"})
        bearer_key = {"Authorization": f"Bearer {plane.api_key}"}
        bearer = await c.get("/api/v1/users/me/", headers=bearer_key)
        before = time.time()
        answers = [
            await c.get("/api/v1/users/me/", headers={"X-API-Key": plane.api_key}) for _ in range(4)
        ]
    assert (bad.status_code, bearer.status_code) == (401, 401)  # Plane's API: X-API-Key only
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["X-RateLimit-Remaining"] for a in answers[:3]] == ["2", "1", "0"]
    # plane/api/rate_limit.py: the reset is now + 60 s on every allowed answer.
    assert before + 59 <= int(answers[0].headers["X-RateLimit-Reset"]) <= time.time() + 60
    refused = answers[3]
    assert "X-RateLimit-Reset" not in refused.headers
    assert "X-RateLimit-Remaining" not in refused.headers
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.json() == {"error_code": 5900, "error_message": "RATE_LIMIT_EXCEEDED"}


async def test_agent_runs_exist_only_in_the_commercial_edition(plane: FakePlane) -> None:
    async with httpx.AsyncClient(base_url=plane.url, headers={"X-API-Key": plane.api_key}) as c:
        path = f"/api/v1/workspaces/{plane.workspace}/runs/"
        off = await c.post(path, json={"agent_slug": "nexus"})
        plane.agent_runs = True
        on = await c.post(path, json={"agent_slug": "nexus"})
    assert off.status_code == 404
    assert on.status_code == 201
    assert on.json()["status"] == "created"


async def test_workspace_members_carry_their_role_as_plane_numbers_it(plane: FakePlane) -> None:
    bob = {"id": "bob-user", "display_name": "bob", "email": "bob@example.com"}
    plane.set_role(bob, MEMBER)

    def members() -> dict[str | None, int | None]:
        return {m.id: m.role for m in _sdk(plane).workspaces.get_members(plane.workspace)}

    assert await asyncio.to_thread(members) == {
        plane.bot["id"]: ADMIN, HUMAN["id"]: ADMIN, "bob-user": MEMBER,
    }  # fmt: skip
    plane.set_role(bob, GUEST)
    assert (await asyncio.to_thread(members))["bob-user"] == GUEST
