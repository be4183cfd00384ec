"""The lab: eval runs newest first (the lab's evals.list) and one eval run's report (its
evals.get); live by re-fetching once per burst of eval events."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.subjects import Family
from nexus_events.errors import InvalidSubject
from nexus_events.events.evals import EvalListRequest
from pydantic import ValidationError

from nexus_console.context import console_of
from nexus_console.forms import bad_request
from nexus_console.lab_report import case_rows, columns, interval_chart, report_of, reports_of
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import format_since, serve_events
from nexus_console.rendering import render

routes = web.RouteTableDef()

# The SSE record that tells a lab page to fetch itself again.
STALE = "stale"


def _is_htmx_for(request: web.Request, target: str) -> bool:
    return (
        request.headers.get("HX-Request") == "true" and request.headers.get("HX-Target") == target
    )


@routes.get("/lab")
async def lab_page(request: web.Request) -> web.Response:
    console = console_of(request)
    try:
        asked = EvalListRequest.model_validate({k: v for k, v in request.query.items() if v})
        if asked.suite is not None:
            subjects.validate_token(asked.suite, "suite")
    except ValidationError as exc:
        raise bad_request(exc) from None
    except InvalidSubject as exc:
        raise web.HTTPBadRequest(text=f"suite: {exc}") from None
    position = console.hub.position()
    data = await console.reads.query(
        subjects.LAB_EVALS_LIST, asked.model_dump(mode="json", exclude_none=True)
    )
    context: dict[str, Any] = {
        "evals": reports_of(data, subjects.LAB_EVALS_LIST),
        "suite": asked.suite or "",
        "since": format_since(position),
    }
    name = "lab/_list.html" if _is_htmx_for(request, "lab") else "lab/page.html"
    return render(request, console.templates, name, **context)


@routes.get("/lab/{eval_run_id}")
async def report_page(request: web.Request) -> web.Response:
    console = console_of(request)
    eval_run_id = request.match_info["eval_run_id"]
    try:
        subjects.validate_token(eval_run_id, "eval run id")
    except InvalidSubject:
        raise web.HTTPNotFound(text=f"no eval run {eval_run_id[:130]!r}: not an id") from None
    position = console.hub.position()
    data = await console.reads.query(subjects.LAB_EVALS_GET, {"eval_run_id": eval_run_id})
    report = report_of(data, subjects.LAB_EVALS_GET)
    context: dict[str, Any] = {
        "report": report,
        "chart": interval_chart(report.revisions),
        "columns": columns(report),
        "rows": case_rows(report),
        "since": format_since(position),
    }
    name = "lab/_report.html" if _is_htmx_for(request, "report") else "lab/report.html"
    return render(request, console.templates, name, **context)


@routes.get("/live/lab")
async def lab_live(request: web.Request) -> web.StreamResponse:
    """`stale` for every eval event (of the eval run `id` when given)."""
    eval_run_id = request.query.get("id")

    def wants(event: LiveEvent) -> bool:
        return event.family is Family.EVAL and (
            eval_run_id is None or event.eval_run_id == eval_run_id
        )

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        return [(STALE, event.name or "")]

    return await serve_events(request, wants, render_event)
