"""Agents and skills: the catalog's lists, an item's YAML, revisions (numbered as core numbers
them) and the unified diff of two; a new revision reaches an open page over SSE; an unknown
item is a 404 page, a revision it does not have a 400."""

from __future__ import annotations

import asyncio
import html

import aiohttp
from nexus_core.app import CoreApp
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_skill
from nexus_testing.polling import eventually

from .conftest import READ_TOKEN, Browserless, Clients

AGENT_YAML = """
id: implementer
role: implementer
model: {name: test-model}
system_prompt: You implement tasks.
tools: [read_file]
"""
SKILL_MD = "---\nname: python\nversion: 1.0.0\n---\n# Python\nUse uv.\n"


async def _page(client: Browserless, path: str) -> str:
    status, page = await client.get(path)
    assert status == 200, page
    return page


async def _text(client: Browserless, path: str) -> str:
    """The page whatever its status (before core's catalog has an item, it is a 404)."""
    return (await client.get(path))[1]


async def test_lists_item_revisions_and_diff(bus: Bus, core: CoreApp, clients: Clients) -> None:
    await apply_agent(bus, AGENT_YAML, applied_by="ops")
    await apply_agent(bus, AGENT_YAML)  # unchanged: no revision
    await apply_agent(bus, AGENT_YAML.replace("You implement", "You build"), applied_by="dev")
    await apply_skill(bus, SKILL_MD)
    client = await clients()
    await client.login(READ_TOKEN)

    listing = await eventually(
        lambda: _page(client, "/catalog"),
        lambda p: 'href="/catalog/agents/implementer"' in p and "/catalog/skills/python" in p,
        what="agent and skill listed",
    )
    assert "test-model" in listing
    assert "1.0.0" in listing

    page = await eventually(
        lambda: _text(client, "/catalog/agents/implementer"),
        lambda p: "Current revision 2" in p,
        what="revision 2 current",
    )
    assert "system_prompt: You build tasks." in page
    assert 'id="revision-1"' in page
    assert 'id="revision-2"' in page
    assert 'id="revision-3"' not in page  # the identical re-apply made none
    assert "dev" in page

    old = await _page(client, "/catalog/agents/implementer?rev=1")
    assert "system_prompt: You implement tasks." in old

    diff = html.unescape(await _page(client, "/catalog/agents/implementer?a=1&b=2"))
    # Its live refresh asks for the same diff, not the bare item page.
    assert 'hx-get="/catalog/agents/implementer?a=1&b=2"' in diff
    assert "--- revision 1" in diff
    assert "+++ revision 2" in diff
    assert "-system_prompt: You implement tasks." in diff
    assert "+system_prompt: You build tasks." in diff

    skill = await _page(client, "/catalog/skills/python")
    assert "version: 1.0.0" in skill
    assert "Use uv." in skill


async def test_a_new_revision_reaches_the_open_page(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await apply_agent(bus, AGENT_YAML)
    client = await clients()
    await client.login(READ_TOKEN)
    page = await eventually(
        lambda: _text(client, "/catalog/agents/implementer"),
        lambda p: "Current revision 1" in p,
        what="the agent",
    )
    assert 'sse-connect="/live/catalog?kind=agent&id=implementer&since=' in page
    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []
    opened = asyncio.Event()

    async def follow() -> None:
        url = f"{client.base}/live/catalog?kind=agent&id=implementer&since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            async for raw in r.content:
                opened.set()
                received.append(raw.decode())
                if "event: stale" in "".join(received):
                    return

    task = asyncio.create_task(follow())
    await asyncio.wait_for(opened.wait(), 10)
    await apply_skill(bus, SKILL_MD)  # another item: no record for this page
    await apply_agent(bus, AGENT_YAML.replace("You implement", "You ship"))
    await asyncio.wait_for(task, 20)
    assert "".join(received).count("event: stale") == 1
    page = await eventually(
        lambda: _text(client, "/catalog/agents/implementer"),
        lambda p: "Current revision 2" in p,
        what="revision 2 after the record",
    )
    assert "You ship tasks." in page


async def test_unknown_items_and_bad_revisions(bus: Bus, core: CoreApp, clients: Clients) -> None:
    await apply_agent(bus, AGENT_YAML)
    client = await clients()
    await client.login(READ_TOKEN)
    await eventually(
        lambda: _text(client, "/catalog/agents/implementer"),
        lambda p: "Current revision 1" in p,
        what="the agent",
    )
    status, page = await client.get("/catalog/agents/nobody")
    assert status == 404
    assert "Not found" in page
    status, _ = await client.get("/catalog/skills/nothing")
    assert status == 404
    status, page = await client.get("/catalog/agents/implementer?rev=9")
    assert status == 400
    assert "no revision 9" in page
    status, page = await client.get("/catalog/agents/implementer?a=x&b=1")
    assert status == 400
    assert "a:" in page
    status, page = await client.get("/catalog/agents/implementer?a=1")
    assert status == 400
