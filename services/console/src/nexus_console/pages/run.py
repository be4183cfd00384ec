"""One run's page: its facts (core's runs.get), its team and spend against each budget scope
(the spend service's runs query), every event of its stream on a timeline (poison included,
shown as such), its log, the approvals it waits on, cancel, "wake now" for a sleeping run,
the diff of its branch; live from the run's events and log lines."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from aiohttp import web
from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent, RunStatus, is_terminal
from nexus_events.contract.streams import LOGS, RUNS
from nexus_events.contract.subjects import Family
from nexus_events.errors import InvalidSubject
from nexus_events.events import CancelRequested, RunWakeRequested
from nexus_events.events.runs import RunConfig
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_console import spend_reads
from nexus_console.auth.identity import Viewer
from nexus_console.auth.middleware import refuse
from nexus_console.branch_diff import branch_diff, cache_dir
from nexus_console.context import CSRF, console_of, viewer_of
from nexus_console.forms import bad_request
from nexus_console.live.hub import LiveEvent, live_event
from nexus_console.live.sse import format_since, serve_events
from nexus_console.pages.budgets import BAR_WIDTH, standing_row
from nexus_console.reads import QueryError, Reads
from nexus_console.rendering import render, render_text
from nexus_console.run_lab import lab_links

log = logging.getLogger("nexus_console.audit")

routes = web.RouteTableDef()

# Most events and log lines a page reads from the streams; the page says when there are more.
MAX_EVENTS = 5000
MAX_LOG_LINES = 2000
# The longest wake reason: the contract's limit on `RunWakeRequested.reason`.
WAKE_REASON_MAX = 2000


def run_id_of(request: web.Request) -> str:
    run_id = request.match_info["run_id"]
    try:
        return subjects.validate_token(run_id, "run id")
    except InvalidSubject:
        raise web.HTTPNotFound(text=f"no run {run_id[:130]!r}: not a run id") from None


@dataclass
class Timeline:
    """A run's stored events as the page shows them."""

    events: list[LiveEvent] = field(default_factory=list)
    more: bool = False

    def first(self, name: RunEvent) -> LiveEvent | None:
        return next((e for e in self.events if e.name == name and not e.poison), None)

    def waiting_approvals(self) -> list[dict[str, Any]]:
        """Approvals requested and not decided yet, in the order they were asked."""
        decided = {
            e.body.get("approval_id")
            for e in self.events
            if e.name == RunEvent.APPROVAL_DECIDED and not e.poison
        }
        return [
            e.body
            for e in self.events
            if e.name == RunEvent.APPROVAL_REQUESTED
            and not e.poison
            and e.body.get("approval_id") not in decided
        ]


async def _read(
    request: web.Request, stream: str, subject: str, cap: int
) -> tuple[list[LiveEvent], bool]:
    bus = console_of(request).bus
    out: list[LiveEvent] = []
    more = False
    reading = cast(AsyncGenerator[Msg, None], bus.replay_raw(stream, filter_subject=subject))
    async with contextlib.aclosing(reading) as msgs:
        async for msg in msgs:
            if len(out) >= cap:
                more = True
                break
            out.append(live_event(msg))
    return out, more


def _time(event: LiveEvent) -> datetime | None:
    if event.time_ns is None:
        return None
    return datetime.fromtimestamp(event.time_ns / 1e9, UTC)


def _config(timeline: Timeline) -> RunConfig | None:
    prepared = timeline.first(RunEvent.PREPARED)
    if prepared is None:
        return None
    try:
        return RunConfig.model_validate(prepared.body.get("config") or {})
    except ValidationError:
        return None


async def _spend(reads: Reads, run_id: str) -> dict[str, Any]:
    """The run's spend against each budget scope covering it (the spend service's runs
    query); the page still shows the rest of the run when the spend service does not answer."""
    try:
        found = await spend_reads.run_spend(reads, run_id)
    except QueryError as exc:
        return {"run": None, "scopes": [], "unavailable": exc.message}
    scopes = [] if found is None else [standing_row(s) for s in found.scopes]
    return {"run": found, "scopes": scopes, "unavailable": None}


@routes.get("/runs/{run_id}")
async def run_page(request: web.Request) -> web.Response:
    console = console_of(request)
    run_id = run_id_of(request)
    position = console.hub.position()
    run = await console.reads.query(subjects.CORE_RUNS_GET, {"run_id": run_id})
    spend = await _spend(console.reads, run_id)
    events, more = await _read(request, RUNS, subjects.run_events_filter(run_id), MAX_EVENTS)
    timeline = Timeline(events, more)
    lines, more_lines = await _read(request, LOGS, subjects.run_logs_filter(run_id), MAX_LOG_LINES)
    config = _config(timeline)
    requested = timeline.first(RunEvent.REQUESTED)
    viewer = viewer_of(request)
    return render(
        request,
        console.templates,
        "run/page.html",
        run=run,
        timeline=timeline,
        time_of=_time,
        lines=lines,
        more_lines=more_lines,
        config=config,
        lab=lab_links(run, timeline.events),
        labels=(requested.body.get("labels") if requested else None) or {},
        spend=spend,
        bar_width=BAR_WIDTH,
        waiting=[] if is_terminal(run.get("status")) else timeline.waiting_approvals(),
        ended=is_terminal(run.get("status")),
        may_operate=viewer.may_operate,
        run_id=run_id,
        sleeping=run.get("status") == RunStatus.SLEEPING,
        wake_reason_max=WAKE_REASON_MAX,
        since=format_since(position),
    )


def _render_live(request: web.Request, run_id: str) -> Any:
    console = console_of(request)
    templates = console.templates
    # The wake form is re-rendered for this page's viewer: their CSRF token and scope.
    viewer, csrf = viewer_of(request), request.get(CSRF, "")

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        if event.family is Family.LOG:
            return [("run", render_text(templates, "run/_log_line.html", line=event))]
        out = [
            (
                "run",
                render_text(templates, "run/_event_row.html", event=event, time_of=_time, oob=True),
            )
        ]
        if event.status is not None:
            # Only `sleeping` moves a run to sleeping, so its body holds the wake time and why.
            sleeping = event.status is RunStatus.SLEEPING
            status = render_text(
                templates, "run/_status.html", status=event.status.value, oob=True,
                sleeping_until=event.body.get("until") if sleeping else None,
                sleep_reason=event.body.get("reason") if sleeping else None,
                now=console.clock.now(),
            )  # fmt: skip
            wake = render_text(
                templates, "run/_wake.html", oob=True, run_id=run_id, sleeping=sleeping,
                csrf=csrf, may_operate=viewer.may_operate, wake_reason_max=WAKE_REASON_MAX,
            )  # fmt: skip
            out += [("run", status), ("run", wake)]
        return out

    return render_event


@routes.get("/live/runs/{run_id}")
async def run_live(request: web.Request) -> web.StreamResponse:
    run_id = run_id_of(request)

    def wants(event: LiveEvent) -> bool:
        return event.run_id == run_id and event.family in (Family.RUN, Family.LOG)

    return await serve_events(request, wants, _render_live(request, run_id))


class CancelForm(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    reason: str = Field("cancelled from the console", min_length=1, max_length=500)


_Form = TypeVar("_Form", bound=BaseModel)


async def _operate(
    request: web.Request, action: str, form_model: type[_Form]
) -> tuple[str, Viewer, _Form, dict[str, Any]]:
    """What a run's button needs before it publishes: the run id, an operating viewer (a
    read-only token is refused and audited), the valid form (else a 400) and core's view of
    the run."""
    run_id = run_id_of(request)
    viewer = viewer_of(request)
    if not viewer.may_operate:
        raise refuse(request, viewer, f"{action} of run {run_id}", "read-only console token")
    try:
        form = form_model.model_validate(dict(await request.post()))
    except ValidationError as exc:
        raise bad_request(exc) from None
    run = await console_of(request).reads.query(subjects.CORE_RUNS_GET, {"run_id": run_id})
    return run_id, viewer, form, run


@routes.post("/runs/{run_id}/cancel")
async def cancel(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    run_id, viewer, form, run = await _operate(request, "cancel", CancelForm)
    if not is_terminal(run.get("status")):
        await console.bus.publish(
            subjects.run_event(run_id, RunEvent.CANCEL_REQUESTED),
            CancelRequested(reason=form.reason, requested_by=viewer.principal),
            msg_id=f"console:cancel:{run_id}",
        )
        log.info("%s asked run %s to cancel: %s", viewer.principal, run_id, form.reason)
    raise web.HTTPSeeOther(f"/runs/{run_id}")


class WakeForm(BaseModel):
    """The "Wake now" form: the reason is optional (the CLI's `--reason` defaults to none)."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    reason: str = Field("", max_length=WAKE_REASON_MAX)


@routes.post("/runs/{run_id}/wake")
async def wake(request: web.Request) -> web.StreamResponse:
    """Ask a sleeping run to wake now, as `nexus run wake` does: operate only; 409 and no
    publish for a run that does not sleep (a wake would change nothing); one stored wake per
    sleep however often it is asked (the message id names the attempt that slept)."""
    console = console_of(request)
    run_id, viewer, form, run = await _operate(request, "wake", WakeForm)
    status = run.get("status")
    if status != RunStatus.SLEEPING:
        raise web.HTTPConflict(text=f"run {run_id} is not sleeping: {status}")
    await console.bus.publish(
        subjects.run_event(run_id, RunEvent.WAKE_REQUESTED),
        RunWakeRequested(reason=form.reason, requested_by=viewer.principal),
        msg_id=f"console:wake:{run_id}:{run.get('attempt', 1)}",
    )
    log.info("%s asked run %s to wake: %s", viewer.principal, run_id, form.reason or "-")
    raise web.HTTPSeeOther(f"/runs/{run_id}")


@routes.get("/runs/{run_id}/diff")
async def diff_fragment(request: web.Request) -> web.Response:
    console = console_of(request)
    run_id = run_id_of(request)
    run = await console.reads.query(subjects.CORE_RUNS_GET, {"run_id": run_id})
    result = run.get("result") or {}
    events, _ = await _read(request, RUNS, subjects.run_events_filter(run_id, RunEvent.PREPARED), 1)
    config = _config(Timeline(events))
    context: dict[str, Any] = {"result": result, "diff": None, "why": None}
    branch = result.get("branch")
    if config is None or config.repo is None:
        context["why"] = "the run has no repository"
    elif not branch or not result.get("pushed"):
        context["why"] = "the run's branch is not pushed (yet): nothing to diff on the remote"
    else:
        s = console.settings
        context["diff"] = await branch_diff(
            config.repo.url, config.repo.ref, branch,
            cache=cache_dir(s.console_git_cache_dir), limit=s.console_git_timeout,
        )  # fmt: skip
    return render(request, console.templates, "run/_diff.html", **context)
