"""`nexus memory add|search|forget|ls|consolidate`: long-term memory, through its service.

Every command is a request to the `nexus-memory` service (``nexus.memory.v1.*``); the CLI
never reads memory's tables. Input is validated with the contract's request models before
anything is sent, so a bad scope or kind is a one-line error naming the option (exit 2).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import typer
from nexus_events.contract import subjects
from nexus_events.events import (
    MemoryConsolidateRequest,
    MemoryForgetRequest,
    MemoryListRequest,
    MemoryRecordRequest,
    MemorySearchRequest,
)
from nexus_events.transport.micro import one_line
from pydantic import BaseModel, ValidationError
from rich.console import Console

from nexus_cli.client import Session
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import ago, console, emit, message, print_json
from nexus_cli.target import resolve_target

app = typer.Typer(help="Long-term memory: add, search, forget, list, consolidate.")

M = TypeVar("M", bound=BaseModel)
# Notes for the person beside a result meant for scripts (stdout stays the result).
notes = Console(stderr=True, highlight=False, soft_wrap=True)

SERVICE = "memory"
# A consolidation pass or a rebuild works through every memory before it answers: the usual
# query timeout would give up on a healthy service, so these wait at least this many seconds.
LONG_WAIT = 120.0
# Characters of a memory's text a table shows; `-o json` has it whole (up to 4000).
TEXT_COLUMN = 160
# Most memories `ls` gathers over its pages; the service answers at most 500 a page.
MAX_LIST = 10_000
PAGE = 500

SCOPE_HELP = "agent:<id>, task:<id>, repo:<name or url>, or global"
ScopesOpt = Annotated[
    list[str] | None, typer.Option("--scope", "-s", help=f"{SCOPE_HELP} (repeatable).")
]
# The option a request field comes from, so an error names what the user typed.
_FLAGS = {
    "scope": "--scope",
    "scopes": "--scope",
    "kind": "--kind",
    "kinds": "--kind",
    "tags": "--tag",
    "key": "--key",
    "supersedes": "--supersedes",
    "memory_id": "ID",
    "reason": "--reason",
    "limit": "--limit",
    "cursor": "--cursor",
    "text": "TEXT",
    "query": "QUERY",
}


def build(model: type[M], **fields: Any) -> M:
    """`model` from the command line's values; exit 2 naming the first bad option."""
    try:
        return model(**fields)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
    problems = []
    for e in errors:
        loc = e["loc"][0] if e["loc"] else "(request)"
        # A scope's own validator explains itself; pydantic prefixes such messages.
        msg = one_line(e["msg"]).removeprefix("Value error, ")
        problems.append(f"{_FLAGS.get(str(loc), str(loc))}: {msg}")
    raise CliError(
        problems[0],
        code=ExitCode.INVALID,
        details=problems[1:],
        hint=f"a scope is {SCOPE_HELP}" if "scope" in problems[0] else None,
    )


def clip(text: str, width: int = TEXT_COLUMN) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def why(item: dict[str, Any]) -> str:
    """Why a search matched, in a few words: the retrievers' ranks and the weights applied."""
    m = item.get("why") or {}
    parts = []
    if m.get("semantic_rank") is not None:
        sim = m.get("similarity")
        similarity = f" ({sim:.2f})" if sim is not None else ""
        parts.append(f"meaning #{m['semantic_rank']}{similarity}")
    if m.get("lexical_rank") is not None:
        parts.append(f"words #{m['lexical_rank']}")
    if m.get("recency") is not None and m["recency"] < 0.995:
        parts.append(f"recency x{m['recency']:.2f}")
    if m.get("kind_weight") not in (None, 1, 1.0):
        parts.append(f"kind x{m['kind_weight']:.2f}")
    if m.get("access_count"):
        parts.append(f"used {m['access_count']}x")
    if not item.get("current", True):
        parts.append("not current")
    return ", ".join(parts)


@app.command("add")
def add_cmd(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(metavar="TEXT", help="What to remember.")],
    scope: Annotated[str, typer.Option("--scope", "-s", help=SCOPE_HELP)],
    kind: Annotated[str, typer.Option(help="fact, decision, preference, ...")] = "fact",
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="Tag (repeatable).")] = None,
    key: Annotated[
        str | None, typer.Option(help="Topic key: a newer memory with this key supersedes it.")
    ] = None,
    supersedes: Annotated[
        list[str] | None, typer.Option(help="Memory id this one replaces (repeatable).")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Record a memory (the service's secret guard checks it first); prints its id."""
    g = globals_of(ctx)

    async def body() -> None:
        request = build(
            MemoryRecordRequest,
            text=text,
            scope=scope,
            kind=kind,
            tags=tag or [],
            key=key,
            supersedes=supersedes or [],
            source="manual",
        )
        async with Session(resolve_target(g), g.timeout) as s:
            reply = await s.query(
                subjects.MEMORY_RECORD, request.model_dump(mode="json"), service=SERVICE
            )
        if output is Output.JSON:
            print_json(reply)
            return
        # stdout is the id alone (`id=$(nexus memory add ...)`); the redaction note is for
        # the person, on stderr.
        console.print(reply["memory_id"], markup=False)
        if reply.get("redacted"):
            found = ", ".join(reply.get("findings") or []) or "a secret"
            notes.print(f"redacted: the text held {found}; stored without it", markup=False)

    run(output, body)


@app.command("search")
def search_cmd(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to look for.")],
    scope: ScopesOpt = None,
    limit: Annotated[int, typer.Option(help="Most memories to show (1-100).")] = 8,
    include_all: Annotated[
        bool,
        typer.Option("--all/--strict", help="--all also shows superseded and stale memories."),
    ] = False,
    kind: Annotated[
        list[str] | None, typer.Option("--kind", "-k", help="Only this kind (repeatable).")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Hybrid search (meaning + words, weighted by recency, use and kind) in named scopes."""
    g = globals_of(ctx)

    async def body() -> None:
        if not scope:
            raise CliError(
                "--scope: name at least one scope to search",
                hint=f"a scope is {SCOPE_HELP}",
                code=ExitCode.INVALID,
            )
        request = build(
            MemorySearchRequest,
            query=query,
            scopes=scope,
            limit=limit,
            strict=not include_all,
            kinds=kind or [],
        )
        async with Session(resolve_target(g), g.timeout) as s:
            reply = await s.query(
                subjects.MEMORY_SEARCH, request.model_dump(mode="json"), service=SERVICE
            )
        items = reply.get("items") or []
        emit(
            output,
            reply,
            ("ID", "SCOPE", "KIND", "SCORE", "WHY", "TEXT"),
            [
                (
                    i["memory_id"],
                    i.get("scope"),
                    i.get("kind"),
                    "" if i.get("score") is None else f"{i['score']:.4f}",
                    why(i),
                    clip(i["text"]),
                )
                for i in items
            ],
            empty="no memory matches",
        )

    run(output, body)


@app.command("forget")
def forget_cmd(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="Memory id.")],
    reason: Annotated[str, typer.Option(help="Why (kept in the history).")] = "",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Stop a memory being found; its history stays on the stream."""
    g = globals_of(ctx)

    async def body() -> None:
        request = build(MemoryForgetRequest, memory_id=memory_id, reason=reason)
        async with Session(resolve_target(g), g.timeout) as s:
            try:
                reply = await s.query(
                    subjects.MEMORY_FORGET, request.model_dump(mode="json"), service=SERVICE
                )
            except CliError as exc:
                if exc.code is ExitCode.NOT_FOUND:
                    exc.hint = "`nexus memory ls` lists memories"
                raise
        message(output, f"forgot {reply['memory_id']} (scope {reply['scope']})", reply)

    run(output, body)


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    scope: ScopesOpt = None,
    history: Annotated[
        bool, typer.Option("--history", help="Also superseded, stale and forgotten memories.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST, help="Most memories to list.")] = 50,
    cursor: Annotated[
        int | None, typer.Option(help="Continue a listing: the next_cursor it printed.")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Stored memories, newest first; pages through the service up to --limit."""
    g = globals_of(ctx)

    async def body() -> None:
        build(MemoryListRequest, scopes=scope or [], cursor=cursor)  # input errors first
        items: list[dict[str, Any]] = []
        next_cursor = cursor
        async with Session(resolve_target(g), g.timeout) as s:
            while True:
                request = build(
                    MemoryListRequest,
                    scopes=scope or [],
                    include_history=history,
                    limit=min(PAGE, limit - len(items)),
                    cursor=next_cursor,
                )
                reply = await s.query(
                    subjects.MEMORY_LIST, request.model_dump(mode="json"), service=SERVICE
                )
                items.extend(reply.get("items") or [])
                next_cursor = reply.get("next_cursor")
                if next_cursor is None or len(items) >= limit:
                    break
        emit(
            output,
            {"items": items, "next_cursor": next_cursor},
            ("ID", "SCOPE", "KIND", "STATUS", "TAGS", "RECORDED", "TEXT"),
            [
                (
                    i["memory_id"],
                    i["scope"],
                    i["kind"],
                    i.get("status", ""),
                    ",".join(i.get("tags") or []) + (f" key={i['key']}" if i.get("key") else ""),
                    ago(i.get("recorded_at")),
                    clip(i["text"]),
                )
                for i in items
            ],
            empty="no memories",
        )
        if output is Output.TABLE and next_cursor is not None:
            console.print(f"[dim]more: add --cursor {next_cursor}[/]")

    run(output, body)


@app.command("consolidate")
def consolidate_cmd(
    ctx: typer.Context, scope: ScopesOpt = None, output: OutputOpt = Output.TABLE
) -> None:
    """Run a consolidation pass now (duplicates, contradictions, decay); all scopes if none."""
    g = globals_of(ctx)

    async def body() -> None:
        request = build(MemoryConsolidateRequest, scopes=scope or [])
        async with Session(resolve_target(g), g.timeout) as s:
            reply = await s.query(
                subjects.MEMORY_CONSOLIDATE,
                request.model_dump(mode="json"),
                service=SERVICE,
                wait=max(g.timeout, LONG_WAIT),
            )
        message(
            output,
            f"consolidated {reply.get('scopes', 0)} scopes: {reply.get('superseded', 0)}"
            f" superseded, {reply.get('stale', 0)} marked stale",
            reply,
        )

    run(output, body)


async def rebuild(s: Session) -> dict[str, Any]:
    """Ask the memory service to replay NEXUS_MEMORY into fresh tables and swap them in."""
    return await s.query(
        subjects.MEMORY_REBUILD, {}, service=SERVICE, wait=max(s.timeout, LONG_WAIT)
    )
