"""`nexus diff A B`: two runs side by side from core's runs.get and runs.events."""

from __future__ import annotations

from typing import Annotated

import typer
from nexus_events.contract import subjects
from nexus_events.events.queries import MAX_PAGE, RunEventView, RunsEventsReply
from nexus_events.events.queries import RunView as RunRow

from nexus_cli.client import Session, check_token
from nexus_cli.commands.lab_runs import JsonOpt, output_of
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, print_json, table
from nexus_cli.rundiff import RunDiff, compare, fold_trace
from nexus_cli.target import resolve_target


async def run_events(s: Session, run_id: str) -> list[RunEventView]:
    """Every event of the run, page by page, in stream order."""
    events: list[RunEventView] = []
    start = 1
    while True:
        reply = await s.query(
            subjects.CORE_RUNS_EVENTS, {"run_id": run_id, "from_seq": start, "limit": MAX_PAGE}
        )
        page = RunsEventsReply.model_validate(reply).events
        events.extend(page)
        if len(page) < MAX_PAGE or page[-1].seq is None:
            return events
        start = page[-1].seq + 1


async def load_diff(s: Session, a: str, b: str) -> RunDiff:
    rows = [RunRow.model_validate(await s.get_run(r)) for r in (a, b)]
    traces = [fold_trace(r, await run_events(s, r)) for r in (a, b)]
    return compare(rows[0], traces[0], rows[1], traces[1])


def print_diff(diff: RunDiff) -> None:
    first = diff.first_difference
    turns = table(
        f"turns: A {diff.a} · B {diff.b}",
        ("TURN", "A", "B", "RESULTS"),
        (
            (
                f"{p.turn}" + (" ◀ first difference" if p.turn == first else ""),
                "\n".join(c.short for c in p.a) or "-",
                "\n".join(c.short for c in p.b) or "-",
                p.verdict,
            )
            for p in diff.turns
        ),
    )
    console.print(turns)
    totals = table(
        None,
        ("TOTAL", "A", "B", "B - A"),
        (
            (
                t.name,
                "-" if t.a is None else t.a,
                "-" if t.b is None else t.b,
                _signed(t.difference),
            )
            for t in diff.totals
        ),
    )
    console.print(totals)
    if first is None:
        console.print("every turn matched", markup=False)
    else:
        console.print(f"first difference at turn {first}", markup=False)


def _shown(value: object) -> object:
    return "-" if value is None else value


def _signed(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:+g}"


def register(app: typer.Typer) -> None:
    """Register `diff`."""

    @app.command("diff")
    def diff_cmd(
        ctx: typer.Context,
        run_a: Annotated[str, typer.Argument(metavar="A", help="A run id.")],
        run_b: Annotated[str, typer.Argument(metavar="B", help="Another run id.")],
        as_json: JsonOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Two runs side by side: per turn the tool calls and whether their results match, then
        turns, tool calls, tokens, cost, wall time and outcome with B's difference from A."""
        g = globals_of(ctx)
        out = output_of(output, as_json)

        async def body() -> None:
            check_token(run_a, "run id")
            check_token(run_b, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                diff = await load_diff(s, run_a, run_b)
            if out is Output.JSON:
                print_json(diff.as_dict())
            else:
                print_diff(diff)

        run(out, body)
