"""The dead letters page: NEXUS_DLQ as `nexus dlq ls` reads it, newest first, filtered by
service and reason, paged by stream sequence, live; one letter in full; replay (operate)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.subjects import Family
from nexus_events.transport.dead_letter_replay import (
    LetterError,
    StoredLetter,
    list_letters,
    read_letter,
    replay_letter,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_console.actions import READ_ONLY
from nexus_console.auth.middleware import refuse
from nexus_console.context import CSRF, console_of, viewer_of
from nexus_console.forms import bad_request
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import format_since, serve_events
from nexus_console.rendering import render, render_text

routes = web.RouteTableDef()

PAGE = 50
REPLAY_TIMEOUT = 5.0


class LetterFilters(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    service: str | None = Field(None, max_length=128, pattern=subjects.TOKEN_PATTERN.pattern)
    reason: str | None = Field(None, max_length=128)
    before: int | None = Field(None, ge=1)

    def admits(self, letter: dict[str, Any]) -> bool:
        return (not self.service or letter.get("service") == self.service) and (
            not self.reason or letter.get("reason") == self.reason
        )

    def shown(self) -> dict[str, str]:
        data = self.model_dump(exclude_none=True, exclude={"before"})
        return {k: str(v) for k, v in data.items() if v != ""}


def _filters(request: web.Request) -> LetterFilters:
    try:
        return LetterFilters.model_validate({k: v for k, v in request.query.items() if v != ""})
    except ValidationError as exc:
        raise bad_request(exc) from None


def _seq(request: web.Request) -> int:
    text = request.match_info["seq"]
    if not text.isdigit() or len(text) > 19 or int(text) < 1:
        raise web.HTTPBadRequest(text=f"seq: not a stream sequence: {text!r}")
    return int(text)


def row_of(stored: StoredLetter) -> dict[str, Any]:
    return {"seq": stored.seq, "time": stored.at, **stored.letter.model_dump(mode="json")}


@routes.get("/dead-letters")
async def dead_letters_page(request: web.Request) -> web.Response:
    console = console_of(request)
    filters = _filters(request)
    position = console.hub.position()
    stored = await list_letters(console.bus, filters.service)
    rows = [
        row_of(s)
        for s in reversed(stored)
        if (filters.before is None or s.seq < filters.before)
        and filters.admits(s.letter.model_dump())
    ]
    page, more = rows[:PAGE], len(rows) > PAGE
    return render(
        request,
        console.templates,
        "dead_letters/page.html",
        letters=page,
        filters=filters.shown(),
        before=filters.before,
        next_before=page[-1]["seq"] if more else None,
        since=format_since(position),
    )


@routes.get("/dead-letters/{seq}")
async def dead_letter_page(request: web.Request) -> web.Response:
    console, seq = console_of(request), _seq(request)
    try:
        letter = await read_letter(console.bus, seq)
    except LetterError as exc:
        raise (web.HTTPNotFound if exc.missing else web.HTTPBadRequest)(text=str(exc)) from None
    return render(request, console.templates, "dead_letters/letter.html", seq=seq, letter=letter)


@routes.post("/dead-letters/{seq}/replay")
async def replay(request: web.Request) -> web.Response:
    console, viewer, seq = console_of(request), viewer_of(request), _seq(request)
    if not viewer.may_operate:
        raise refuse(request, viewer, f"replay of dead letter {seq}", READ_ONLY)
    try:
        letter, ack = await replay_letter(console.bus, seq, REPLAY_TIMEOUT)
    except LetterError as exc:
        raise (web.HTTPNotFound if exc.missing else web.HTTPBadRequest)(text=str(exc)) from None
    if ack.duplicate:
        told = f"dead letter {seq} was already replayed onto {letter.subject}: not published again"
    else:
        told = f"replayed dead letter {seq} onto {letter.subject} ({ack.stream} seq {ack.seq})"
    return web.Response(text=told, content_type="text/html")


@routes.get("/live/dead-letters")
async def dead_letters_live(request: web.Request) -> web.StreamResponse:
    filters = _filters(request)
    templates = console_of(request).templates
    # A live row's replay form, as the page's own rows: this viewer's token and scope.
    who = {"viewer": viewer_of(request), "csrf": request.get(CSRF, "")}

    def wants(event: LiveEvent) -> bool:
        return event.family is Family.DLQ and event.poison is None

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        if filters.before is not None or not filters.admits(event.body):
            return []
        row = {"seq": event.seq, "time": None, **event.body}
        return [("letter", render_text(templates, "dead_letters/_new_row.html", d=row, **who))]

    return await serve_events(request, wants, render_event)
