"""The console's pages, one module each; `ROUTES` lists every module's routes."""

from __future__ import annotations

from aiohttp import web

from nexus_console.pages import (
    approvals,
    board,
    budgets,
    catalog,
    dead_letters,
    flow_runs,
    flows,
    lab,
    login,
    run,
    runs,
    schedules,
    usage,
)

ROUTES: tuple[web.RouteTableDef, ...] = (
    login.routes,
    runs.routes,
    run.routes,
    flows.routes,
    flow_runs.routes,
    approvals.routes,
    dead_letters.routes,
    schedules.routes,
    board.routes,
    usage.routes,
    budgets.routes,
    catalog.routes,
    lab.routes,
)
