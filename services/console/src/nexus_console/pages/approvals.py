"""The approvals page: everything waiting for a person (as `nexus approvals ls` finds it), who
may decide each, approve/deny in place, live from the runs stream."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from nexus_events.contract.approver_policy import REQUESTER, ApproverPolicy
from nexus_events.contract.runstate import RunEvent, is_terminal
from nexus_events.contract.subjects import Family
from nexus_events.errors import InvalidSubject
from nexus_events.transport import approval_answers as answers
from nexus_events.transport.approvals import ApprovalRecord
from pydantic import ValidationError

from nexus_console.actions import READ_ONLY
from nexus_console.actions import approvals as act
from nexus_console.auth.middleware import refuse
from nexus_console.context import console_of, viewer_of
from nexus_console.forms import bad_request
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import format_since, serve_events
from nexus_console.rendering import render, render_text

routes = web.RouteTableDef()

# Most runs looked at, as `nexus approvals ls` (one page of core's runs.list).
MAX_RUNS = 500
TEAM_PREFIX = "team:"


def _principal_shown(principal: str, policy: ApproverPolicy, requester: str | None) -> str:
    """A principal as the page names it: the requester and a team's members spelt out."""
    if principal == REQUESTER and requester:
        return f"requester ({requester})"
    if principal.startswith(TEAM_PREFIX):
        members = policy.teams.get(principal.removeprefix(TEAM_PREFIX), ())
        return f"{principal} ({', '.join(members) or 'no members configured'})"
    return principal


def row_of(record: ApprovalRecord) -> dict[str, Any]:
    asked = record.asked
    assert asked is not None  # only asked approvals are shown
    requester = record.requested.requested_by if record.requested else None
    policy = act.policy_of(record)
    return {
        "run_id": record.run_id,
        "approval_id": record.approval_id,
        "agent_id": record.agent_id,
        "tool": asked.tool,
        "summary": asked.summary,
        "why": asked.why,
        "expires_at": asked.expires_at,
        "may_decide": [_principal_shown(p, policy, requester) for p in policy.principals],
    }


async def _record_or_404(request: web.Request) -> ApprovalRecord:
    run_id, approval_id = request.match_info["run_id"], request.match_info["approval_id"]
    try:
        record = await act.asked_record(console_of(request).bus, run_id, approval_id)
    except InvalidSubject as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    if record is None:
        raise web.HTTPNotFound(text=f"run {run_id} has no approval {approval_id}")
    return record


@routes.get("/approvals")
async def approvals_page(request: web.Request) -> web.Response:
    console = console_of(request)
    position = console.hub.position()
    records = await act.pending(console.bus, console.reads, MAX_RUNS)
    return render(
        request,
        console.templates,
        "approvals/page.html",
        approvals=[row_of(r) for r in records],
        since=format_since(position),
    )


@routes.get("/approvals/{run_id}/{approval_id}/row")
async def approval_row(request: web.Request) -> web.Response:
    """One approval's row: a live page fetches it when the approval appears."""
    record = await _record_or_404(request)
    return render(request, console_of(request).templates, "approvals/_row.html", a=row_of(record))


@routes.post("/runs/{run_id}/approvals/{approval_id}")
async def decide_approval(request: web.Request) -> web.Response:
    console, viewer = console_of(request), viewer_of(request)
    try:
        form = act.DecisionForm.model_validate(dict(await request.post()))
    except ValidationError as exc:
        raise bad_request(exc) from None
    record = await _record_or_404(request)
    what = f"approval {record.approval_id} of run {record.run_id}"
    if not viewer.may_operate:
        await act.refuse_read_viewer(console.bus, record, form.decision, viewer)
        raise refuse(request, viewer, what, READ_ONLY)
    try:
        decided = await act.decide(console.bus, console.reads, record, form, viewer)
    except answers.AnswerRefusedError as exc:
        raise refuse(request, viewer, what, exc.reason) from None
    except answers.AlreadySettledError as exc:
        raise web.HTTPConflict(text=str(exc)) from None
    return render(
        request,
        console.templates,
        "approvals/_decided.html",
        run_id=record.run_id,
        approval_id=record.approval_id,
        told=f"{decided.decision} by {decided.decided_by}",
    )


def _render_live(request: web.Request) -> Any:
    templates = console_of(request).templates

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        run_id = event.run_id
        if run_id is None:
            return []
        approval_id = event.body.get("approval_id")
        if event.name == RunEvent.APPROVAL_REQUESTED and isinstance(approval_id, str):
            html = render_text(
                templates, "approvals/_arrived.html", run_id=run_id, approval_id=approval_id
            )
            return [("approval", html)]
        if event.name == RunEvent.APPROVAL_DECIDED and isinstance(approval_id, str):
            html = render_text(
                templates, "approvals/_gone.html", run_id=run_id, approval_id=approval_id
            )
            return [("approval", html)]
        if event.status is not None and is_terminal(event.status):
            return [("approval", render_text(templates, "approvals/_run_gone.html", run_id=run_id))]
        return []

    return render_event


@routes.get("/live/approvals")
async def approvals_live(request: web.Request) -> web.StreamResponse:
    def wants(event: LiveEvent) -> bool:
        return event.family is Family.RUN and (
            event.name in (RunEvent.APPROVAL_REQUESTED, RunEvent.APPROVAL_DECIDED)
            or (event.status is not None and is_terminal(event.status))
        )

    return await serve_events(request, wants, _render_live(request))
