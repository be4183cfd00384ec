"""The MCP tool `usage`: the spend service's usage query (a stand-in on the real nats-server,
spend_responder.py) as the caller; its arguments validated by the contract's UsageQuery, a
token scoped to agents limited to one of its agents."""

from __future__ import annotations

from nexus_events.events.spend import UsageGroup, UsageQuery, UsageReport
from nexus_events.transport.bus import Bus

from nexus_cli.mcp.auth import Scope

from .spend_responder import SpendResponder, spend_service
from .test_mcp_scopes import _client, _data, _error
from .test_spend_cli import REPORT


async def test_usage_asks_the_spend_service_with_the_tools_arguments(
    bus: Bus, nats_url: str
) -> None:
    async with (
        spend_service(bus, SpendResponder(usage=REPORT)) as spend,
        _client(nats_url, Scope.READ, None) as client,
    ):
        result = await client.call_tool(
            "usage", {"by": "team", "since": "2026-11-01", "team": "alpha"}
        )
        assert UsageReport.model_validate(_data(result)) == REPORT
        query = spend.queries[-1]
        assert isinstance(query, UsageQuery)
        assert (query.by, query.team, query.agent_id) == (UsageGroup.TEAM, "alpha", None)
        assert query.since is not None
        assert query.since.isoformat() == "2026-11-01T00:00:00+00:00"

        bad = await client.call_tool("usage", {"by": "colour"})
        assert _error(bad).startswith("by: Input should be 'run'")
        assert len(spend.queries) == 1  # refused before asking


async def test_a_scoped_token_gets_usage_of_its_own_agents_only(bus: Bus, nats_url: str) -> None:
    async with (
        spend_service(bus, SpendResponder(usage=REPORT)) as spend,
        _client(nats_url, Scope.READ, ("planner",)) as client,
    ):
        assert _error(await client.call_tool("usage", {})) == (
            "usage needs agent, one of this token's agents"
        )
        other = await client.call_tool("usage", {"agent": "reviewer"})
        assert _error(other) == "agent 'reviewer' is outside this token's agents"
        assert spend.queries == []
        mine = await client.call_tool("usage", {"agent": "planner"})
        assert UsageReport.model_validate(_data(mine)) == REPORT
        query = spend.queries[-1]
        assert isinstance(query, UsageQuery)
        assert (query.by, query.agent_id) == (UsageGroup.AGENT, "planner")


async def test_usage_with_no_spend_service_is_a_one_line_tool_error(nats_url: str) -> None:
    async with _client(nats_url, Scope.READ, None) as client:
        error = _error(await client.call_tool("usage", {}))
        assert error == "nothing answers nexus.spend.v1.usage: the spend service is not running"
