"""The usage page: cost and tokens per day, team, agent, agent revision, model, flow, task and
origin, as charts and tables, from the spend service's usage query (docs/spend.md: its
projection of every model call; core's usage.summary stays for its other clients)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from aiohttp import web
from nexus_events.events.queries import MAX_USAGE_ROWS
from nexus_events.events.spend import UsageGroup, UsageLine, UsageQuery
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from nexus_console import spend_reads
from nexus_console.context import console_of
from nexus_console.forms import bad_request
from nexus_console.rendering import render

routes = web.RouteTableDef()

# What the page charts, in this order (a run and a flow run are too many to chart).
SHOWN: tuple[UsageGroup, ...] = (
    UsageGroup.DAY,
    UsageGroup.TEAM,
    UsageGroup.AGENT,
    UsageGroup.AGENT_REVISION,
    UsageGroup.MODEL,
    UsageGroup.FLOW,
    UsageGroup.TASK,
    UsageGroup.ORIGIN,
)
DEFAULT_DAYS = 30
# Most bars per chart (the costliest; days: the whole range).
TOP = 20


class UsageRange(BaseModel):
    """The page's query string: a date range, the last 30 days when left out."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    since: date | None = None
    until: date | None = None

    @model_validator(mode="after")
    def _ordered(self) -> UsageRange:
        if self.since and self.until and self.until < self.since:
            raise ValueError("until must not be before since")
        return self

    def bounds(self, today: date) -> tuple[date, date]:
        until = self.until or today
        return self.since or until - timedelta(days=DEFAULT_DAYS - 1), until


def _chart(by: UsageGroup, rows: list[UsageLine]) -> dict[str, Any]:
    return {
        "by": by.value,
        "kind": "line" if by is UsageGroup.DAY else "bar",
        "labels": [r.key if r.key is not None else "(none)" for r in rows],
        "cost_usd": [r.cost_usd for r in rows],
        "tokens": [r.tokens_in + r.tokens_out for r in rows],
    }


@routes.get("/usage")
async def usage_page(request: web.Request) -> web.Response:
    console = console_of(request)
    try:
        chosen = UsageRange.model_validate({k: v for k, v in request.query.items() if v})
    except ValidationError as exc:
        raise bad_request(exc) from None
    since, until = chosen.bounds(console.clock.now().astimezone(UTC).date())
    start = datetime.combine(since, time(), UTC)
    end = datetime.combine(until + timedelta(days=1), time(), UTC)
    sections = []
    for by in SHOWN:
        limit = MAX_USAGE_ROWS if by is UsageGroup.DAY else TOP
        query = UsageQuery(by=by, since=start, until=end, limit=limit)
        rows = (await spend_reads.usage(console.reads, query)).rows
        sections.append({"by": by.value, "rows": rows, "chart": json.dumps(_chart(by, rows))})
    return render(
        request,
        console.templates,
        "usage/page.html",
        sections=sections,
        since=since.isoformat(),
        until=until.isoformat(),
    )
