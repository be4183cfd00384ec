"""The budgets page: every budget (the spend service's budgets.list), its limits and what
reaching them does, each scope instance's standing this period as a bar of spent and reserved
against the limit, and an open ask linked to the approval that decides it."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from nexus_events.events.spend import BudgetView, ScopeStanding, StandingState

from nexus_console import spend_reads
from nexus_console.context import console_of
from nexus_console.rendering import render

routes = web.RouteTableDef()

# The width of a standing's bar, in SVG user units (100 % of the limit).
BAR_WIDTH = 240


def standing_row(s: ScopeStanding) -> dict[str, Any]:
    bar = spend_reads.bar_of(s)
    spent = round(bar.spent_pct * BAR_WIDTH / 100, 1)
    reserved = round(min(bar.reserved_pct, 100 - bar.spent_pct) * BAR_WIDTH / 100, 1)
    return {
        "s": s,
        "bar": bar,
        "spent_width": spent,
        "reserved_x": spent,
        "reserved_width": reserved,
        # An open ask is decided as an approval on its pseudo-run (docs/spend.md).
        "ask_open": s.state is StandingState.ASKING and s.ask_id is not None,
    }


def budget_row(view: BudgetView) -> dict[str, Any]:
    b = view.budget
    limits = b.limits
    parts = []
    if limits.cost_usd is not None:
        parts.append(f"${limits.cost_usd:,.2f}")
    if limits.tokens is not None:
        parts.append(f"{limits.tokens:,} tokens")
    if limits.runs is not None:
        parts.append(f"{limits.runs} runs")
    return {
        "budget": b,
        "revision": view.revision,
        "limits": " · ".join(parts),
        "standings": [standing_row(s) for s in view.standings],
    }


@routes.get("/budgets")
async def budgets_page(request: web.Request) -> web.Response:
    console = console_of(request)
    reply = await spend_reads.budgets(console.reads)
    return render(
        request,
        console.templates,
        "budgets/page.html",
        budgets=[budget_row(v) for v in sorted(reply.budgets, key=lambda v: v.budget.id)],
        bar_width=BAR_WIDTH,
    )
