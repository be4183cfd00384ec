"""The flow runs pages: the list (newest first, filtered, live) and one flow run drawn on its
pinned definition's graph, each step's state, round and runs live from the flow's events, a
waiting gate answerable in place."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.subjects import Family
from nexus_events.events.flows import FlowEvent, FlowRunView, FlowStatus, StepStatus, step_run_id
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_console.context import CSRF, console_of, viewer_of
from nexus_console.flowgraph_view import graph_of, state_classes
from nexus_console.forms import bad_request
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import Renderer, format_since, serve_events
from nexus_console.pages.flows import flow_at
from nexus_console.rendering import render, render_text

routes = web.RouteTableDef()

PAGE = 50
# SSE record names: `step` carries JSON for flowgraph.js, `flow` HTML fragments swapped
# out-of-band by htmx.
STEP_RECORD = "step"
FLOW_RECORD = "flow"

# The flow run status an event leaves its flow run in (the flows service's own projection).
STATUS_AFTER: dict[str, FlowStatus] = {
    FlowEvent.ACCEPTED: FlowStatus.RUNNING,
    FlowEvent.STEP_STARTED: FlowStatus.RUNNING,
    FlowEvent.RESUMED: FlowStatus.RUNNING,
    FlowEvent.WAITING: FlowStatus.WAITING,
    FlowEvent.COMPLETED: FlowStatus.COMPLETED,
    FlowEvent.FAILED: FlowStatus.FAILED,
    FlowEvent.CANCELLED: FlowStatus.CANCELLED,
}


class FlowRunFilters(BaseModel):
    """The flow runs page's query string, checked before the flows service sees it."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    status: FlowStatus | None = None
    flow: str | None = Field(None, max_length=128, pattern=subjects.TOKEN_PATTERN.pattern)
    task: str | None = Field(None, max_length=128, pattern=subjects.TOKEN_PATTERN.pattern)
    cursor: str | None = Field(None, pattern=r"^[0-9]{1,19}$")

    def query(self) -> dict[str, Any]:
        body: dict[str, Any] = {"limit": PAGE}
        if self.status is not None:
            body["status"] = self.status.value
        for ours, theirs in (("flow", "flow"), ("task", "task_id"), ("cursor", "cursor")):
            if getattr(self, ours):
                body[theirs] = getattr(self, ours)
        return body

    def shown(self) -> dict[str, str]:
        data = self.model_dump(mode="json", exclude_none=True, exclude={"cursor"})
        return {k: str(v) for k, v in data.items() if v != ""}

    def admits_new(self, event: LiveEvent) -> bool:
        """Whether a just-accepted flow run belongs on this page: the first page, and its
        filters can be told from the `accepted` event (a task filter cannot)."""
        if self.cursor or self.task or self.status not in (None, FlowStatus.RUNNING):
            return False
        return not self.flow or event.body.get("flow") == self.flow


def filters_of(request: web.Request) -> FlowRunFilters:
    try:
        return FlowRunFilters.model_validate({k: v for k, v in request.query.items() if v != ""})
    except ValidationError as exc:
        raise bad_request(exc) from None


def flow_run_id_of(request: web.Request) -> str:
    flow_run_id = request.match_info["flow_run_id"]
    if subjects.TOKEN_PATTERN.fullmatch(flow_run_id) is None:
        raise web.HTTPNotFound(text=f"no flow run {flow_run_id!r}")
    return flow_run_id


@routes.get("/flow-runs")
async def flow_runs_page(request: web.Request) -> web.Response:
    console = console_of(request)
    filters = filters_of(request)
    position = console.hub.position()
    data = await console.reads.query(subjects.FLOWS_LIST, filters.query())
    context = {
        "flow_runs": data.get("flows", []),
        "next_cursor": data.get("next_cursor"),
        "filters": filters.shown(),
        "cursor": filters.cursor,
        "since": format_since(position),
        "statuses": list(FlowStatus),
    }
    target = request.headers.get("HX-Target")
    if request.headers.get("HX-Request") == "true" and target == "flow-runs":
        return render(request, console.templates, "flow_runs/_table.html", **context)
    return render(request, console.templates, "flow_runs/list.html", **context)


def _list_renderer(request: web.Request, filters: FlowRunFilters) -> Renderer:
    templates = console_of(request).templates

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        flow_run_id = event.flow_run_id
        status = STATUS_AFTER.get(event.name or "")
        if flow_run_id is None or status is None or event.poison:
            return []
        if event.name == FlowEvent.ACCEPTED:
            if not filters.admits_new(event):
                return []
            row = {
                "flow_run_id": flow_run_id, "flow": event.body.get("flow"),
                "revision": event.body.get("revision"), "status": status.value,
                "task_id": None, "current_step": None, "requested_at": None, "updated_at": None,
            }  # fmt: skip
            return [(FLOW_RECORD, render_text(templates, "flow_runs/_new_row.html", run=row))]
        fragment = render_text(
            templates, "flow_runs/_status.html", flow_run_id=flow_run_id, status=status.value
        )
        return [(FLOW_RECORD, fragment)]

    return render_event


@routes.get("/live/flow-runs")
async def flow_runs_live(request: web.Request) -> web.StreamResponse:
    filters = filters_of(request)

    def wants(event: LiveEvent) -> bool:
        return event.family is Family.FLOW and event.name in STATUS_AFTER

    return await serve_events(request, wants, _list_renderer(request, filters))


@routes.get("/flow-runs/{flow_run_id}")
async def flow_run_page(request: web.Request) -> web.Response:
    console = console_of(request)
    flow_run_id = flow_run_id_of(request)
    position = console.hub.position()
    data = await console.reads.query(subjects.FLOWS_GET, {"flow_run_id": flow_run_id})
    run = FlowRunView.model_validate(data)
    revision, definition = await flow_at(console.reads, run.flow, run.revision)
    graph = graph_of(definition, run)
    gates = [node for node in graph.nodes if node.gate is not None]
    return render(
        request,
        console.templates,
        "flow_runs/page.html",
        run=run,
        revision=revision,
        graph=graph.to_json(),
        gates=gates,
        since=format_since(position),
    )


def step_update(event: LiveEvent) -> dict[str, Any] | None:
    """What a flow event changes of one node: `{step, state, classes, round, run_id}`."""
    body = event.body
    step = body.get("step")
    if not isinstance(step, str):
        return None
    state: str | None
    if event.name in (FlowEvent.STEP_STARTED, FlowEvent.RESUMED):
        state = StepStatus.RUNNING
    elif event.name == FlowEvent.STEP_FINISHED:
        # A map item ending is not its step ending: the map step's own record says that.
        state = None if body.get("item") is not None else str(body.get("status"))
    elif event.name == FlowEvent.WAITING:
        state = StepStatus.WAITING
    else:
        return None
    run_id = body.get("run_id") if body.get("kind") != "gate" else None
    return {
        "step": step, "state": state, "classes": state_classes(state),
        "round": body.get("round"), "run_id": run_id,
    }  # fmt: skip


def _run_renderer(request: web.Request, flow_run_id: str) -> Renderer:
    console = console_of(request)
    templates = console.templates
    viewer_may_operate = viewer_of(request).may_operate
    csrf = request.get(CSRF, "")

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        if event.poison:
            line = render_text(
                templates, "flow_runs/_event.html", event_name="poison", text=event.poison
            )
            return [(FLOW_RECORD, line)]
        out: list[tuple[str, str]] = []
        update = step_update(event)
        if update is not None:
            out.append((STEP_RECORD, json.dumps(update)))
        body = event.body
        if event.name == FlowEvent.WAITING and body.get("kind") == "gate":
            step, round = str(body.get("step")), int(body.get("round") or 1)
            gate = {
                "step": step, "round": round, "approval_id": body.get("approval_id") or "",
                "gate_run_id": body.get("gate_run_id") or step_run_id(flow_run_id, step, round),
                "summary": body.get("summary") or "",
            }  # fmt: skip
            fragment = render_text(
                templates, "flow_runs/_new_gate.html", gate=gate,
                may_operate=viewer_may_operate, csrf=csrf,
            )  # fmt: skip
            out.append((FLOW_RECORD, fragment))
        if event.name == FlowEvent.RESUMED:
            gate_id = f"gate-{body.get('step')}-r{body.get('round') or 1}"
            out.append((FLOW_RECORD, f'<div id="{gate_id}" hx-swap-oob="delete"></div>'))
        status = STATUS_AFTER.get(event.name or "")
        if status is not None:
            out.append((
                FLOW_RECORD,
                render_text(templates, "flow_runs/_run_status.html", status=status.value,
                            reason=body.get("reason") or "", message=body.get("message") or ""),
            ))  # fmt: skip
        out.append((FLOW_RECORD, render_text(
            templates, "flow_runs/_event.html", event_name=event.name or "",
            text=" ".join(f"{k}={body[k]}" for k in ("step", "round", "item", "status", "reason",
                                                      "run_id") if body.get(k) is not None),
        )))  # fmt: skip
        return out

    return render_event


@routes.get("/live/flow-runs/{flow_run_id}")
async def flow_run_live(request: web.Request) -> web.StreamResponse:
    flow_run_id = flow_run_id_of(request)

    def wants(event: LiveEvent) -> bool:
        return event.family is Family.FLOW and event.flow_run_id == flow_run_id

    return await serve_events(request, wants, _run_renderer(request, flow_run_id))
