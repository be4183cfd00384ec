"""Server-sent events to one open page: each live event its page renders into fragments,
written as ``event:``/``data:`` records, with a comment every few seconds so proxies keep
the connection open, and a ``reload`` record when the page fell too far behind."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping

from aiohttp import web

from nexus_console.context import Console, console_of
from nexus_console.live.hub import LiveEvent, Wants, Watcher

KEEPALIVE = 15.0
# SSE record names the pages listen for (htmx's sse-swap and console.js).
RELOAD = "reload"

# A page's renderer: the (record name, HTML or JSON text) pairs an event becomes; none to
# skip it.
Renderer = Callable[[LiveEvent], Iterable[tuple[str, str]]]


def parse_since(text: str | None) -> dict[str, int] | None:
    """``NEXUS_RUNS:12,NEXUS_FLOWS:3`` (a page's rendered position, or the Last-Event-ID the
    browser sends when it reconnects) as a mapping; None when absent or malformed."""
    if not text:
        return None
    since: dict[str, int] = {}
    for part in text.split(","):
        stream, sep, seq = part.strip().partition(":")
        if not sep or not stream.isascii() or not seq.isdigit() or len(seq) > 19:
            return None
        since[stream] = int(seq)
    return since


def format_since(position: Mapping[str, int]) -> str:
    return ",".join(f"{stream}:{seq}" for stream, seq in sorted(position.items()))


def _record(name: str, data: str, event_id: str | None = None) -> bytes:
    lines = [f"event: {name}"]
    if event_id:
        lines.append(f"id: {event_id}")
    lines.extend(f"data: {line}" for line in data.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()


async def serve_events(request: web.Request, wants: Wants, render: Renderer) -> web.StreamResponse:
    """Stream what `wants` takes, rendered by `render`, until the page goes away."""
    console = console_of(request)
    since = parse_since(request.headers.get("Last-Event-ID")) or parse_since(
        request.query.get("since")
    )
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache, no-transform",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    position = dict(since or console.hub.position())
    console.metrics.live_page(opened=True)
    try:
        await _stream(response, console.hub.watch(wants, since), render, position, console)
    except ConnectionResetError:
        # The page went away (closed, reloaded, navigated): the normal end of a live feed.
        return response
    finally:
        console.metrics.live_page(opened=False)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


async def _stream(
    response: web.StreamResponse,
    watching: contextlib.AbstractContextManager[Watcher],
    render: Renderer,
    position: dict[str, int],
    console: Console,
) -> None:
    with watching as watcher:
        await response.write(b": live\n\n")
        while True:
            try:
                event = await asyncio.wait_for(watcher.queue.get(), KEEPALIVE)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if event is None:
                if watcher.overflowed:
                    await response.write(_record(RELOAD, "behind"))
                break
            position[event.stream] = event.seq
            event_id = format_since(position)
            records = list(render(event))
            for name, data in records:
                await response.write(_record(name, data, event_id))
            console.metrics.live_records(len(records))
