"""The schedules page: NEXUS_SCHEDULES folded as `nexus schedule ls` folds it (who made each:
an operator, or an agent's run with the `schedule_create` tool), with pause and resume
(operate only: the same re-definition `nexus schedule pause|resume` publishes), live."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.subjects import Family
from nexus_events.errors import InvalidSubject
from nexus_events.transport.schedule_records import (
    ScheduleRecord,
    read_schedule,
    read_schedules,
    set_enabled,
    status_of,
)

from nexus_console.actions import READ_ONLY
from nexus_console.auth.middleware import refuse
from nexus_console.context import console_of, viewer_of
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import format_since, serve_events
from nexus_console.rendering import render

routes = web.RouteTableDef()


def row_of(rec: ScheduleRecord) -> dict[str, Any]:
    d = rec.definition
    if d.cron:
        trigger = f"cron {d.cron} ({d.timezone or 'UTC'})"
    elif d.interval_seconds:
        trigger = f"every {d.interval_seconds}s"
    else:
        trigger = f"at {d.at}"
    return {
        "schedule_id": rec.schedule_id,
        "target": f"flow {d.flow}" if d.flow else f"agent {d.agent_id}",
        "trigger": trigger,
        "task_id": d.task_id,
        "status": status_of(rec),
        "enabled": d.enabled,
        "last_fire": rec.fires[-1] if rec.fires else None,
        "last_miss": rec.misses[-1] if rec.misses else None,
        # An agent's own schedule names the run that made it and its agent; an operator's has
        # neither (the CLI's CREATED BY column).
        "created_by_run": d.created_by_run,
        "created_by_agent": d.created_by_agent,
    }


@routes.get("/schedules")
async def schedules_page(request: web.Request) -> web.Response:
    console = console_of(request)
    position = console.hub.position()
    records = await read_schedules(console.bus)
    return render(
        request,
        console.templates,
        "schedules/page.html",
        schedules=[row_of(r) for r in records],
        since=format_since(position),
    )


async def _toggle(request: web.Request, enabled: bool) -> web.Response:
    console, viewer = console_of(request), viewer_of(request)
    schedule_id = request.match_info["schedule_id"]
    try:
        subjects.validate_token(schedule_id, "schedule id")
    except InvalidSubject as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    verb = "resume" if enabled else "pause"
    if not viewer.may_operate:
        raise refuse(request, viewer, f"{verb} of schedule {schedule_id}", READ_ONLY)
    rec = await read_schedule(console.bus, schedule_id)
    if rec is None:
        raise web.HTTPNotFound(text=f"no schedule {schedule_id!r}")
    prefix = f"console:{viewer.name}"
    changed = await set_enabled(console.bus, rec, enabled, prefix)
    rec.definition = rec.definition.model_copy(update={"enabled": enabled})
    return render(request, console.templates, "schedules/_row.html", s=row_of(rec), changed=changed)


@routes.post("/schedules/{schedule_id}/pause")
async def pause(request: web.Request) -> web.Response:
    return await _toggle(request, enabled=False)


@routes.post("/schedules/{schedule_id}/resume")
async def resume(request: web.Request) -> web.Response:
    return await _toggle(request, enabled=True)


@routes.get("/live/schedules")
async def schedules_live(request: web.Request) -> web.StreamResponse:
    """Any schedule event: the page reloads its table (a fold of the stream, not a row)."""

    def wants(event: LiveEvent) -> bool:
        return event.family is Family.SCHEDULE

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        return [("schedule", event.ids.get("schedule_id", ""))]

    return await serve_events(request, wants, render_event)
