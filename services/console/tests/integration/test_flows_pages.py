"""The flows pages: the catalog's flows listed, one flow's graph, YAML and revisions, the diff
between two revisions, and bad input answered as a 400 or 404 page."""

from __future__ import annotations

import html
import json
from typing import Any

from nexus_core.app import CoreApp
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_flow
from nexus_testing.polling import eventually

from .conftest import READ_TOKEN, Browserless, Clients
from .flow_fixtures import AGENT_YAML, REVIEW_FLOW

CHANGED = REVIEW_FLOW.replace("max_rounds: 3", "max_rounds: 5")


async def signed_in(clients: Clients) -> Browserless:
    client = await clients()
    await client.login(READ_TOKEN)
    return client


def graph_in(page: str) -> dict[str, Any]:
    raw = page.split('data-graph="', 1)[1].split('"', 1)[0]
    graph: dict[str, Any] = json.loads(html.unescape(raw))
    return graph


async def two_revisions(bus: Bus, core: CoreApp, client: Browserless) -> str:
    await apply_agent(bus, AGENT_YAML)
    await apply_flow(bus, REVIEW_FLOW)
    await apply_flow(bus, CHANGED)
    await apply_flow(bus, CHANGED)  # unchanged: no revision of its own

    async def flow_page() -> tuple[int, str]:
        return await client.get("/flows/review")

    _, page = await eventually(
        flow_page, lambda r: r[0] == 200 and "revision 2" in r[1], what="review at revision 2"
    )
    return str(page)


async def test_the_flows_page_lists_each_flow_at_its_latest_revision(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    client = await signed_in(clients)
    await two_revisions(bus, core, client)
    status, page = await client.get("/flows")
    assert status == 200
    row = page.split('data-flow="review"', 1)[1].split("</tr>", 1)[0]
    assert '<a href="/flows/review">review</a>' in row
    assert "<td>2</td>" in row
    assert "implementer" in row


async def test_a_flow_shows_its_graph_yaml_and_revisions(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    client = await signed_in(clients)
    page = await two_revisions(bus, core, client)
    graph = graph_in(page)
    assert [n["id"] for n in graph["nodes"]] == ["__start__", "implement", "review", "end"]
    loop = [e for e in graph["edges"] if e["from"] == "review" and e["to"] == "implement"]
    assert loop
    assert loop[0]["loop"] is True
    assert loop[0]["max_rounds"] == 5
    assert "/static/vendor/dagre.min.js" in page
    assert "/static/flowgraph.js" in page
    assert "max_rounds: 5" in page.split('id="flow-yaml"', 1)[1]
    assert 'id="revision-1"' in page
    assert 'id="revision-2"' in page
    # An older revision is shown as it was.
    status, old = await client.get("/flows/review?revision=1")
    assert status == 200
    assert "revision 1" in old
    assert "max_rounds: 3" in old.split('id="flow-yaml"', 1)[1]


async def test_the_diff_between_two_revisions_is_unified(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    client = await signed_in(clients)
    await two_revisions(bus, core, client)
    status, page = await client.get("/flows/review?a=1&b=2")
    assert status == 200
    diff = html.unescape(page.split('id="flow-diff"', 1)[1].split("</pre>", 1)[0])
    assert "--- review revision 1" in diff
    assert "+++ review revision 2" in diff
    assert '<span class="del">-  max_rounds: 3</span>' in diff
    assert '<span class="add">+  max_rounds: 5</span>' in diff
    status, same = await client.get("/flows/review?a=2&b=2")
    assert status == 200
    assert "define the same flow" in same


async def test_bad_revisions_are_400_and_unknown_flows_404(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    client = await signed_in(clients)
    await two_revisions(bus, core, client)
    for query, says in (
        ("?a=1&b=9", "no revision 9"),
        ("?a=x&b=2", "a: "),
        ("?revision=0", "revision: "),
        ("?a=1", "a diff needs both"),
    ):
        status, page = await client.get(f"/flows/review{query}")
        assert status == 400, query
        assert says in html.unescape(page), (query, page)
    status, page = await client.get("/flows/no_such_flow")
    assert status == 404
    assert "no_such_flow" in html.unescape(page)
    status, _ = await client.get("/flows/not%20a%20token")
    assert status == 404
