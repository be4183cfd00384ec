"""The usage page: cost and tokens per day, agent, flow and task, as charts and tables, from
core's usage.summary (a GROUP BY over the agent_runs projection: no store of the console's)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.events.queries import UsageBy
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from nexus_console.context import console_of
from nexus_console.forms import bad_request
from nexus_console.rendering import render

routes = web.RouteTableDef()

# What the page charts, in this order; origin stays a query away (`by: origin`).
SHOWN: tuple[UsageBy, ...] = (UsageBy.DAY, UsageBy.AGENT, UsageBy.FLOW, UsageBy.TASK)
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


def _chart(by: UsageBy, rows: list[dict[str, Any]]) -> dict[str, Any]:
    def label(row: dict[str, Any]) -> str:
        return str(row.get("key")) if row.get("key") is not None else "(none)"

    return {
        "by": by.value,
        "kind": "line" if by is UsageBy.DAY else "bar",
        "labels": [label(r) for r in rows],
        "cost_usd": [r.get("cost_usd", 0) for r in rows],
        "tokens": [r.get("tokens_in", 0) + r.get("tokens_out", 0) for r in rows],
    }


@routes.get("/usage")
async def usage_page(request: web.Request) -> web.Response:
    console = console_of(request)
    try:
        chosen = UsageRange.model_validate({k: v for k, v in request.query.items() if v})
    except ValidationError as exc:
        raise bad_request(exc) from None
    since, until = chosen.bounds(console.clock.now().astimezone(UTC).date())
    window = {
        "since": datetime.combine(since, time(), UTC).isoformat(),
        "until": datetime.combine(until + timedelta(days=1), time(), UTC).isoformat(),
    }
    sections = []
    for by in SHOWN:
        limit = 1000 if by is UsageBy.DAY else TOP
        data = await console.reads.query(
            subjects.CORE_USAGE_SUMMARY, {"by": by.value, "limit": limit, **window}
        )
        rows = list(data.get("rows", []))
        sections.append({"by": by.value, "rows": rows, "chart": json.dumps(_chart(by, rows))})
    return render(
        request,
        console.templates,
        "usage/page.html",
        sections=sections,
        since=since.isoformat(),
        until=until.isoformat(),
    )
