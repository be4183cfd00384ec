"""Reading a run's stored and live output: `nexus events` and `nexus logs`."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncGenerator
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import TERMINAL_EVENTS, is_terminal
from nexus_events.contract.streams import LOGS, RUNS

from nexus_cli.client import Session, check_token
from nexus_cli.follow import follow
from nexus_cli.options import Output, OutputOpt, RunArg, globals_of, run
from nexus_cli.output import console, print_json
from nexus_cli.runview import describe
from nexus_cli.target import resolve_target

FollowOpt = Annotated[
    bool, typer.Option("--follow", "-f", help="Keep following until the run ends.")
]
# Seconds without a new log line, after the run ended, before `logs -f` stops.
LOG_TAIL_QUIET = 1.0


def event_dict(d: Decoded) -> dict[str, Any]:
    """One event as `nexus events -o json` lists it."""
    return {
        "seq": d.envelope.stream_seq,
        "event": d.address.event,
        "time": d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
        "source": d.envelope.source,
        "body": d.event.model_dump(mode="json", exclude_none=True),
    }


def register(app: typer.Typer) -> None:
    """Register `events` and `logs`."""

    @app.command("events")
    def events_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        follow_run: FollowOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """The run's events from NEXUS_RUNS; -f keeps following until the run ends."""
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                if not follow_run:
                    found = [d async for d in s.bus.replay(RUNS, run_id=run_id)]
                    if not found:
                        await s.get_run(run_id)  # exit 3 with the usual message if unknown
                    _print_events(output, [event_dict(d) for d in found])
                    return
                # Following reads the stored events too: only ask whether there are any.
                if not await _has_events(s, run_id):
                    await s.get_run(run_id)
                stream: AsyncGenerator[Decoded, None] = follow(
                    s.bus, RUNS, subjects.run_events_filter(run_id)
                )
                async with contextlib.aclosing(stream) as events:
                    async for d in events:
                        _print_events(output, [event_dict(d)], stream_mode=True)
                        if d.address.event in TERMINAL_EVENTS:
                            return

        run(output, body)

    @app.command("logs")
    def logs_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        follow_run: FollowOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """The run's log lines from NEXUS_LOGS; -f follows them until the run ends."""
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                row = await s.get_run(run_id)
                if not follow_run or is_terminal(row["status"]):
                    async for d in s.bus.replay(LOGS, filter_subject=subjects.run_log(run_id)):
                        _print_log(output, d)
                    return
                await _follow_logs(s, run_id, output)

        run(output, body)


async def _has_events(s: Session, run_id: str) -> bool:
    info = await s.bus.js.stream_info(RUNS, subjects_filter=subjects.run_events_filter(run_id))
    return bool(info.state.subjects)


def _print_events(
    output: Output, events: list[dict[str, Any]], *, stream_mode: bool = False
) -> None:
    if output is Output.JSON:
        if stream_mode:
            for e in events:
                sys.stdout.write(__import__("json").dumps(e, default=str) + "\n")
                sys.stdout.flush()
        else:
            print_json({"events": events})
        return
    for e in events:
        console.print(
            f"{e['seq']:>6} {e['time'] or '':<32} {describe(e['event'], e['body'])}", markup=False
        )


def _print_log(output: Output, d: Decoded) -> None:
    body = d.event.model_dump(mode="json")
    if output is Output.JSON:
        sys.stdout.write(__import__("json").dumps(body) + "\n")
        sys.stdout.flush()
    else:
        console.print(
            f"[dim]{body.get('stream', ''):>8}[/] {body.get('text', '')}", highlight=False
        )


async def _follow_logs(s: Session, run_id: str, output: Output) -> None:
    """Log lines live until the run ends (then what is still stored, and stop)."""
    ended = asyncio.Event()

    async def watch_end() -> None:
        stream = follow(s.bus, RUNS, subjects.run_events_filter(run_id))
        async with contextlib.aclosing(stream) as events:
            async for d in events:
                if d.address.event in TERMINAL_EVENTS:
                    ended.set()
                    return

    watcher = asyncio.create_task(watch_end())
    logs = follow(s.bus, LOGS, subjects.run_log(run_id))
    try:
        async with contextlib.aclosing(logs) as lines:
            while not ended.is_set():
                nxt = asyncio.ensure_future(anext(lines))
                end = asyncio.ensure_future(ended.wait())
                done, _ = await asyncio.wait({nxt, end}, return_when=asyncio.FIRST_COMPLETED)
                end.cancel()
                if nxt in done:
                    _print_log(output, nxt.result())
                    continue
                # The run ended: print what is still arriving, until it goes quiet.
                try:
                    _print_log(output, await asyncio.wait_for(nxt, LOG_TAIL_QUIET))
                except TimeoutError:
                    break
                while True:
                    try:
                        _print_log(output, await asyncio.wait_for(anext(lines), LOG_TAIL_QUIET))
                    except TimeoutError:
                        break
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
