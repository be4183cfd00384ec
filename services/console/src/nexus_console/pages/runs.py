"""The runs page: newest first, filtered and paged by core's runs.list, live from the runs
stream (a new run appears at the top, a status change in its row, without a reload; a
sleeping run says until when and why)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.contract.subjects import Family
from nexus_events.events.runs import Origin
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_console.context import console_of
from nexus_console.forms import bad_request
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import format_since, serve_events
from nexus_console.rendering import render, render_text

routes = web.RouteTableDef()

PAGE = 50


class RunFilters(BaseModel):
    """The runs page's query string: each filter optional, checked before core sees it."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    status: RunStatus | None = None
    agent: str | None = Field(None, max_length=128, pattern=subjects.TOKEN_PATTERN.pattern)
    task: str | None = Field(None, max_length=128, pattern=subjects.TOKEN_PATTERN.pattern)
    flow: str | None = Field(None, max_length=128, pattern=subjects.TOKEN_PATTERN.pattern)
    origin: Origin | None = None
    text: str | None = Field(None, max_length=256)
    cursor: str | None = Field(None, pattern=r"^[0-9]{1,19}$")

    def query(self) -> dict[str, Any]:
        body: dict[str, Any] = {"limit": PAGE}
        for ours, core in (
            ("status", "status"), ("agent", "agent_id"), ("task", "task_id"),
            ("flow", "flow"), ("origin", "origin"), ("text", "text"), ("cursor", "cursor"),
        ):  # fmt: skip
            value = getattr(self, ours)
            if value:
                body[core] = value.value if hasattr(value, "value") else value
        return body

    def shown(self) -> dict[str, str]:
        """The filters as the form shows them (no cursor)."""
        data = self.model_dump(mode="json", exclude_none=True, exclude={"cursor"})
        return {k: str(v) for k, v in data.items() if v != ""}

    def admits_new(self, event: LiveEvent) -> bool:
        """Whether a just-requested run belongs on this page (the first page, and it meets
        the filters)."""
        body = event.body
        if self.cursor or self.status not in (None, RunStatus.REQUESTED):
            return False
        if (
            (self.agent and body.get("agent_id") != self.agent)
            or (self.task and body.get("task_id") != self.task)
            or (self.origin and body.get("origin") != self.origin.value)
            or (self.flow and (body.get("labels") or {}).get("flow") != self.flow)
        ):
            return False
        if self.text:
            fields = ("run_id", "agent_id", "task_id", "input", "requested_by")
            hay = " ".join(str(body.get(k) or "") for k in fields) + f" {event.run_id}"
            return self.text.lower() in hay.lower()
        return True


def filters_of(request: web.Request) -> RunFilters:
    try:
        return RunFilters.model_validate({k: v for k, v in request.query.items() if v != ""})
    except ValidationError as exc:
        raise bad_request(exc) from None


@routes.get("/")
async def home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/runs")


@routes.get("/runs")
async def runs_page(request: web.Request) -> web.Response:
    console = console_of(request)
    filters = filters_of(request)
    position = console.hub.position()
    data = await console.reads.query(subjects.CORE_RUNS_LIST, filters.query())
    context = {
        "runs": data.get("runs", []),
        "next_cursor": data.get("next_cursor"),
        "filters": filters.shown(),
        "cursor": filters.cursor,
        "since": format_since(position),
        "statuses": list(RunStatus),
        "origins": list(Origin),
    }
    if request.headers.get("HX-Request") == "true" and request.headers.get("HX-Target") == "runs":
        return render(request, console.templates, "runs/_table.html", **context)
    return render(request, console.templates, "runs/page.html", **context)


def _render_live(request: web.Request, filters: RunFilters) -> Any:
    console = console_of(request)
    templates = console.templates

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        if event.run_id is None:
            return []
        out: list[tuple[str, str]] = []
        if event.name == RunEvent.REQUESTED and filters.admits_new(event):
            row = {
                "run_id": event.run_id, "status": RunStatus.REQUESTED.value,
                "agent_id": event.body.get("agent_id"), "task_id": event.body.get("task_id"),
                "origin": event.body.get("origin"), "input": event.body.get("input"),
                "labels": event.body.get("labels") or {}, "turns": 0, "cost_usd": 0.0,
                "attempt": 1, "phases": {}, "last_event_at": None,
            }  # fmt: skip
            out.append(("run", render_text(templates, "runs/_new_row.html", run=row)))
        elif event.status is not None:
            # Only `sleeping` moves a run to sleeping, so its body holds the wake time and why.
            sleeping = event.status is RunStatus.SLEEPING
            out.append(
                ("run", render_text(
                    templates, "runs/_status.html", run_id=event.run_id, status=event.status.value,
                    sleeping_until=event.body.get("until") if sleeping else None,
                    sleep_reason=event.body.get("reason") if sleeping else None,
                    now=console.clock.now(),
                ))
            )  # fmt: skip
        return out

    return render_event


@routes.get("/live/runs")
async def runs_live(request: web.Request) -> web.StreamResponse:
    filters = filters_of(request)

    def wants(event: LiveEvent) -> bool:
        return event.family is Family.RUN and (
            event.name == RunEvent.REQUESTED or event.status is not None
        )

    return await serve_events(request, wants, _render_live(request, filters))
