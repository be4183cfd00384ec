"""The board: core's board.get by column, live by re-fetching the board once per burst of
relevant events (a task event, or a status change of a run the board shows)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.subjects import Family
from nexus_events.events.tasks import Column

from nexus_console.context import console_of
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import format_since, serve_events
from nexus_console.rendering import render

routes = web.RouteTableDef()

# The SSE record that tells the board it is stale (htmx re-fetches it, debounced).
STALE = "stale"


def columns_of(tasks: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The board's columns in the contract's order, each with its tasks."""
    by_column: dict[str, list[dict[str, Any]]] = {c.value: [] for c in Column}
    for task in tasks:
        by_column.setdefault(str(task.get("column")), []).append(task)
    return list(by_column.items())


def run_ids_of(tasks: list[dict[str, Any]]) -> set[str]:
    ids: set[str] = set()
    for task in tasks:
        runs = [task.get("current_run"), *task.get("past_runs", []), *task.get("child_runs", [])]
        ids.update(str(r["run_id"]) for r in runs if r)
    return ids


@routes.get("/board")
async def board_page(request: web.Request) -> web.Response:
    console = console_of(request)
    position = console.hub.position()
    data = await console.reads.query(subjects.CORE_BOARD_GET, {})
    context: dict[str, Any] = {
        "columns": columns_of(data.get("tasks", [])),
        "since": format_since(position),
    }
    if request.headers.get("HX-Request") == "true" and request.headers.get("HX-Target") == "board":
        return render(request, console.templates, "board/_columns.html", **context)
    return render(request, console.templates, "board/page.html", **context)


@routes.get("/live/board")
async def board_live(request: web.Request) -> web.StreamResponse:
    # The runs the board shows, learnt once when the feed opens (a read caused by the page
    # opening, not a poll), then grown from the run requests of tasks and their children.
    data = await console_of(request).reads.query(subjects.CORE_BOARD_GET, {})
    shown = run_ids_of(data.get("tasks", []))

    def wants(event: LiveEvent) -> bool:
        if event.family is Family.TASK:
            return True
        if event.family is not Family.RUN or event.run_id is None:
            return False
        if event.name == RunEvent.REQUESTED and (
            event.body.get("task_id") or event.body.get("parent_run_id") in shown
        ):
            shown.add(event.run_id)
            return True
        return event.status is not None and event.run_id in shown

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        # What changed, for people reading the stream; the page only needs the record.
        return [(STALE, f"{event.name or ''} {event.run_id or event.ids.get('task_id', '')}")]

    return await serve_events(request, wants, render_event)
