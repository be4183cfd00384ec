"""The tools: each a thin call into what the CLI already does over NATS, as the caller.

Every failure leaves as a one-line `ToolError` (the server turns it into ``isError``); the
scope check and the argument cap run before a tool does (`server.NexusMCP.call_tool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Literal, ParamSpec, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import CLI, Answer
from nexus_events.contract.codec import Decoded
from nexus_events.events import MemoryRecordRequest, MemorySearchRequest
from nexus_events.events.spend import UsageQuery
from nexus_events.transport.micro import one_line
from pydantic import BaseModel, ValidationError

from nexus_cli.client import Session, check_token
from nexus_cli.commands.approvals import pending_approvals
from nexus_cli.commands.dlq import dead_letters
from nexus_cli.commands.flow_runs import build_flow_request, publish_flow
from nexus_cli.commands.run_control import decide_approval, request_cancel, request_wake
from nexus_cli.commands.runs import build_run_request, event_line, publish_run, track_run
from nexus_cli.errors import CliError
from nexus_cli.mcp.auth import Identity, Scope
from nexus_cli.mcp.scoping import (
    check_agent,
    check_memory_scope,
    check_unscoped,
    filter_agents,
    filter_approvals,
    filter_board,
    filter_flows,
    visible_flow,
    visible_run,
)
from nexus_cli.mcp.state import Nexus
from nexus_cli.runview import RunView
from nexus_cli.spendview import SPEND

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)

# Where a decision, a request or a cancel comes from, in msg ids and on the approval claim.
SURFACE = "mcp"
# Events of a run a view shows beside it (get_run, nexus://runs/{id}).
RECENT_EVENTS = 20
# Seconds a notification or follow_run's end waits for core to project the run's last event.
PROJECTION_WAIT = 3.0
# follow_run waits at most this long, whatever the caller asks.
MAX_FOLLOW_SECONDS = 3600.0

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, openWorldHint=False)
# Starting work changes the world but destroys nothing; a repeat starts another run.
ADDITIVE = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True
)
DESTRUCTIVE = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=True
)
ANSWER = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True
)

# The scope each tool needs; the server refuses the rest before the tool runs.
OPERATE_TOOLS = frozenset(
    {"start_run", "start_flow", "cancel_run", "wake_run", "answer_approval", "add_memory"}
)


def needs(tool: str) -> Scope:
    return Scope.OPERATE if tool in OPERATE_TOOLS else Scope.READ


def one_line_error(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A CliError (what the CLI's functions raise) becomes the tool's one-line error."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except CliError as exc:
            raise ToolError(one_line(exc.message)) from None

    return wrapper


def validated(model: type[M], **fields: Any) -> M:
    """`model` from the tool's arguments; the first problem as one line."""
    try:
        return model(**fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        msg = one_line(first["msg"]).removeprefix("Value error, ")
        raise ToolError(f"{where}: {msg}") from None


def answer_of(who: Identity) -> Answer:
    """The approver-policy principal of a caller: its NATS user (as the CLI answers), and the
    name its runs were requested by (so a requester may decide its own runs' approvals)."""
    user = who.nats_user or who.name
    return Answer(surface=CLI, who=f"nats:{user}", aliases=frozenset({user, who.requested_by}))


async def run_view(nexus: Nexus, who: Identity, run_id: str) -> dict[str, Any]:
    """The run as core projects it, with its most recent events (exit 3: no such run, or
    one outside the caller's agents)."""
    s = await nexus.session_for(who)
    row = await visible_run(s, who, run_id)
    reply = await s.query(subjects.CORE_RUNS_EVENTS, {"run_id": run_id})
    events = reply.get("events", [])
    return {"run": row, "recent_events": events[-RECENT_EVENTS:]}


async def board_view(nexus: Nexus, who: Identity) -> dict[str, Any]:
    """The board, with only the runs (and tasks) the caller's agents account for."""
    s = await nexus.session_for(who)
    return await filter_board(s, who, await s.query(subjects.CORE_BOARD_GET, {}))


async def wait_projected(s: Session, run_id: str, seq: int) -> None:
    """Wait (briefly) until core's view of the run holds the event at stream sequence `seq`:
    whoever is told of a change, or of the end, then reads it, not the view of before."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PROJECTION_WAIT
    # Core usually has it within ~6 ms: ask soon, then back off to 50 ms.
    pause = 0.005
    while loop.time() < deadline:
        with contextlib.suppress(CliError):
            row = await s.get_run(run_id)
            if int(row.get("last_seq") or 0) >= seq:
                return
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.05)


def register_tools(server: MCPServer, nexus: Nexus) -> None:  # noqa: PLR0915
    """Every tool of docs/mcp.md on `server`, acting through `nexus`."""

    @server.tool(annotations=READ_ONLY, description="The agents in the catalog.")
    @one_line_error
    async def list_agents(ctx: Context) -> dict[str, Any]:
        who = nexus.identity(ctx)
        s = await nexus.session_for(who)
        return filter_agents(who, await s.query(subjects.CORE_CATALOG_AGENTS_LIST))

    @server.tool(annotations=READ_ONLY, description="The flow definitions in the catalog.")
    @one_line_error
    async def list_flows(ctx: Context) -> dict[str, Any]:
        who = nexus.identity(ctx)
        s = await nexus.session_for(who)
        return filter_flows(who, await s.query(subjects.CORE_CATALOG_FLOWS_LIST))

    @server.tool(annotations=READ_ONLY, description="A run: status, cost, result, recent events.")
    @one_line_error
    async def get_run(run_id: str, ctx: Context) -> dict[str, Any]:
        return await run_view(nexus, nexus.identity(ctx), run_id)

    @server.tool(
        annotations=READ_ONLY,
        description="Follow a run until it ends: a progress notification per run event (send a"
        " progressToken), then the final run view. Gives up after timeout_seconds.",
    )
    @one_line_error
    async def follow_run(run_id: str, ctx: Context, timeout_seconds: float = 600) -> dict[str, Any]:
        if not 0 < timeout_seconds <= MAX_FOLLOW_SECONDS:
            raise ToolError(f"timeout_seconds must be in (0, {MAX_FOLLOW_SECONDS:.0f}]")
        who = nexus.identity(ctx)
        s = await nexus.session_for(who)
        # A run that does not exist, or is outside the caller's agents: one line.
        await visible_run(s, who, check_token(run_id, "run id"))
        seen = 0
        last_seq = 0

        async def progress(name: str, d: Decoded) -> None:
            nonlocal seen, last_seq
            seen += 1
            last_seq = d.envelope.stream_seq or last_seq
            await ctx.report_progress(seen, None, event_line(name, d).strip())

        view = await track_run(s, RunView(run_id), progress, timeout_seconds)
        await wait_projected(s, run_id, last_seq)
        return view.as_dict()

    @server.tool(annotations=READ_ONLY, description="The board: tasks by column, with their runs.")
    @one_line_error
    async def board(ctx: Context) -> dict[str, Any]:
        return await board_view(nexus, nexus.identity(ctx))

    @server.tool(
        annotations=READ_ONLY,
        description="Pending approvals (asked, undecided, unexpired), of one run or of all.",
    )
    @one_line_error
    async def list_approvals(ctx: Context, run_id: str | None = None) -> dict[str, Any]:
        who = nexus.identity(ctx)
        s = await nexus.session_for(who)
        if run_id is not None:
            await visible_run(s, who, check_token(run_id, "run id"))
        return {"approvals": filter_approvals(who, await pending_approvals(s, run_id))}

    @server.tool(
        annotations=READ_ONLY,
        description="Search long-term memory (meaning and words) in a scope: agent:<id>,"
        " task:<id>, repo:<name>, or global (the default).",
    )
    @one_line_error
    async def search_memory(
        query: str, ctx: Context, scope: str = "global", limit: int = 8
    ) -> dict[str, Any]:
        request = validated(MemorySearchRequest, query=query, scopes=[scope], limit=limit)
        who = nexus.identity(ctx)
        check_memory_scope(who, scope)
        s = await nexus.session_for(who)
        return await s.query(
            subjects.MEMORY_SEARCH, request.model_dump(mode="json"), service="memory"
        )

    @server.tool(annotations=READ_ONLY, description="Dead letters, newest last.")
    @one_line_error
    async def list_dead_letters(
        ctx: Context, service: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        if service is not None:
            check_token(service, "service")
        if not 1 <= limit <= 1000:
            raise ToolError("limit must be between 1 and 1000")
        who = nexus.identity(ctx)
        check_unscoped(who, "list_dead_letters")
        s = await nexus.session_for(who)
        return {"dead_letters": (await dead_letters(s, service))[-limit:]}

    @server.tool(
        annotations=READ_ONLY,
        description="Spend: runs, model calls, tokens and USD grouped by one key (by: agent,"
        " agent_revision, model, team, flow, flow_run, task, origin, day or run), costliest"
        " first, with the total; since: a date or time (UTC); team, agent: filters.",
    )
    @one_line_error
    async def usage(
        ctx: Context,
        by: str = "agent",
        since: str | None = None,
        team: str | None = None,
        agent: str | None = None,
    ) -> dict[str, Any]:
        fields = {"since": since, "team": team, "agent_id": agent}
        query = validated(UsageQuery, by=by, **{k: v for k, v in fields.items() if v})
        who = nexus.identity(ctx)
        if who.scoped:
            # Totals over every agent would tell a scoped token what the others spend.
            if agent is None:
                raise ToolError("usage needs agent, one of this token's agents")
            check_agent(who, agent)
        s = await nexus.session_for(who)
        return await s.query(subjects.SPEND_USAGE, query.model_dump(mode="json"), service=SPEND)

    @server.tool(
        annotations=ADDITIVE,
        description="Start a run of an agent (input: instructions; task: a task id; repo: a"
        " git URL or path). Returns the run id; follow_run watches it.",
    )
    @one_line_error
    async def start_run(
        agent: str,
        ctx: Context,
        task: str | None = None,
        input: str = "",
        repo: str | None = None,
    ) -> dict[str, Any]:
        who = nexus.identity(ctx)
        rid, request = build_run_request(
            agent=agent, requested_by=who.requested_by, task=task, input_text=input, repo=repo
        )
        check_agent(who, agent)
        s = await nexus.session_for(who)
        seq = await publish_run(s, rid, request, msg_prefix=SURFACE)
        # Returned once core knows the run (bounded): get_run on the id then finds it.
        await wait_projected(s, rid, seq)
        return {"run_id": rid}

    @server.tool(annotations=ADDITIVE, description="Start a flow; returns the flow run id.")
    @one_line_error
    async def start_flow(
        flow: str,
        ctx: Context,
        task: str | None = None,
        input: str = "",
        repo: str | None = None,
    ) -> dict[str, Any]:
        who = nexus.identity(ctx)
        fid, request = build_flow_request(
            flow=flow, requested_by=who.requested_by, task=task, input_text=input, repo=repo
        )
        s = await nexus.session_for(who)
        if who.scoped:
            await visible_flow(s, who, flow)
        await publish_flow(s, fid, request, msg_prefix=SURFACE)
        return {"flow_run_id": fid}

    @server.tool(annotations=DESTRUCTIVE, description="Ask a run to stop (it ends cancelled).")
    @one_line_error
    async def cancel_run(
        run_id: str, ctx: Context, reason: str = "user_requested"
    ) -> dict[str, Any]:
        who = nexus.identity(ctx)
        s = await nexus.session_for(who)
        await visible_run(s, who, run_id)
        return await request_cancel(s, run_id, reason, who.requested_by, msg_prefix=SURFACE)

    @server.tool(
        annotations=ANSWER,
        description="Wake a sleeping run now (its agent called `sleep`; get_run shows"
        " sleeping_until): the scheduler starts its next attempt, told the reason.",
    )
    @one_line_error
    async def wake_run(run_id: str, ctx: Context, reason: str = "woken over MCP") -> dict[str, Any]:
        who = nexus.identity(ctx)
        s = await nexus.session_for(who)
        await visible_run(s, who, run_id)
        return await request_wake(s, run_id, reason, who.requested_by, msg_prefix=SURFACE)

    @server.tool(
        annotations=ANSWER,
        description="Approve or deny a gated tool call a run waits on (list_approvals shows"
        " them); the approver policy decides who may.",
    )
    @one_line_error
    async def answer_approval(
        run_id: str,
        approval_id: str,
        decision: Literal["approve", "deny"],
        ctx: Context,
        comment: str | None = None,
    ) -> dict[str, Any]:
        who = nexus.identity(ctx)
        s = await nexus.session_for(who)
        await visible_run(s, who, run_id)
        answer = answer_of(who)
        await decide_approval(
            s,
            run_id,
            approval_id,
            decision,
            comment,
            who=answer.who.removeprefix("nats:"),
            answer=answer,
            surface=SURFACE,
        )
        return {"run_id": run_id, "approval_id": approval_id, "decision": decision}

    @server.tool(
        annotations=ADDITIVE,
        description="Record a memory in a scope (agent:<id>, task:<id>, repo:<name>, global);"
        " the memory service refuses or redacts secrets.",
    )
    @one_line_error
    async def add_memory(text: str, scope: str, ctx: Context, kind: str = "fact") -> dict[str, Any]:
        request = validated(MemoryRecordRequest, text=text, scope=scope, kind=kind, source="manual")
        who = nexus.identity(ctx)
        check_memory_scope(who, scope)
        s = await nexus.session_for(who)
        return await s.query(
            subjects.MEMORY_RECORD, request.model_dump(mode="json"), service="memory"
        )
