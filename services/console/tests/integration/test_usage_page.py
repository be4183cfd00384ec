"""The usage page: the spend service's usage per day, team, agent, agent revision, model,
flow, task and origin, charted and tabled, over the chosen range; a malformed or inverted
range is a 400 naming the field; no spend service is a 503 naming the query."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from nexus_events.events.spend import UsageGroup

from .conftest import READ_TOKEN, Clients
from .spend_double import SpendDouble, line, spend

__all__ = ["spend"]  # the spend double's fixture


def _charts(text: str) -> dict[str, dict[str, object]]:
    found = re.findall(r'data-chart="([^"]*)"', text)
    charts = [json.loads(raw.replace("&#34;", '"')) for raw in found]
    return {c["by"]: c for c in charts}


async def test_cost_and_tokens_per_each_grouping(spend: SpendDouble, clients: Clients) -> None:
    spend.usage_rows = {
        UsageGroup.DAY: [line("2026-11-27", 0.25), line("2026-11-28", 1.5, runs=2)],
        UsageGroup.TEAM: [line("alpha", 1.25, runs=2), line(None, 0.5)],
        UsageGroup.AGENT: [line("tester", 1.0), line("planner", 0.75, runs=2)],
        UsageGroup.AGENT_REVISION: [line("tester@3", 1.0)],
        UsageGroup.MODEL: [line("gpt-test", 1.75, runs=3)],
        UsageGroup.TASK: [line("T-1", 1.75, runs=3)],
        UsageGroup.ORIGIN: [line("cli", 1.75, runs=3)],
    }
    client = await clients()
    await client.login(READ_TOKEN)
    status, text = await client.get("/usage?since=2026-11-01&until=2026-11-28")
    assert status == 200, text
    by = _charts(text)
    assert list(by) == ["day", "team", "agent", "agent_revision", "model", "task", "origin"]
    assert 'id="usage-flow"' in text
    assert "No runs in this range." in text
    assert by["team"]["labels"] == ["alpha", "(none)"]
    assert by["agent"]["cost_usd"] == [1.0, 0.75]
    assert by["agent"]["tokens"] == [110, 110]
    assert by["day"]["kind"] == "line"
    assert by["model"]["kind"] == "bar"
    assert "$1.2500" in text
    assert "tester@3" in text

    asked = {q.by: q for q in spend.asked}
    assert set(asked) == {g for g in UsageGroup if g not in (UsageGroup.RUN, UsageGroup.FLOW_RUN)}
    team = asked[UsageGroup.TEAM]
    assert (team.since, team.until, team.limit) == (
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 11, 29, tzinfo=UTC),
        20,
    )
    assert asked[UsageGroup.DAY].limit == 1000


async def test_a_bad_range_is_a_400(spend: SpendDouble, clients: Clients) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    status, text = await client.get("/usage?since=yesterday")
    assert status == 400
    assert "since" in text
    status, text = await client.get("/usage?since=2026-02-02&until=2026-01-01")
    assert status == 400
    assert "until must not be before since" in text


async def test_no_spend_service_is_a_503_naming_the_query(clients: Clients) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    status, text = await client.get("/usage")
    assert status == 503
    assert "nexus.spend.v1.usage" in text
