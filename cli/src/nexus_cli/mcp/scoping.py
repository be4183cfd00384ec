"""What a token scoped to agents sees: their runs, approvals, flows and memories, nothing else.

A run, agent or flow outside the scope is "not found" with the very words core uses for one
that does not exist, so a scoped token learns nothing of ids it may not see; lists are
filtered. An unscoped caller (`Identity.agents` None) goes through every function unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nexus_events.contract import subjects

from nexus_cli.client import Session
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.mcp.auth import Identity

# Memory scope kinds a scoped token may use: only its own agents' memories are theirs alone
# (task, repo and global memories gather what runs of any agent learned).
AGENT_MEMORY = "agent"


def _not_found(what: str, ident: str) -> CliError:
    return CliError(f"no {what} {ident!r}", code=ExitCode.NOT_FOUND)


async def visible_run(s: Session, who: Identity, run_id: str) -> dict[str, Any]:
    """The run as core projects it, if `who` sees its agent; else exit 3 "no run", as for a
    run that does not exist."""
    row = await s.get_run(run_id)
    if not who.sees(row.get("agent_id")):
        raise _not_found("run", run_id)
    return row


def check_agent(who: Identity, agent: str) -> None:
    """Refuse (before anything is published) an agent outside `who`'s scope; the same words
    whether or not the agent exists."""
    if not who.sees(agent):
        raise CliError(f"agent {agent!r} is outside this token's agents")


def flow_agents(definition: dict[str, Any]) -> list[str]:
    """The agents a flow definition's steps run (run and map steps name one each)."""
    steps = definition.get("steps") or []
    return [str(s["agent"]) for s in steps if isinstance(s, dict) and s.get("agent")]


def sees_flow(who: Identity, definition: dict[str, Any]) -> bool:
    """A flow is visible when every agent it runs is."""
    return all(who.sees(agent) for agent in flow_agents(definition))


async def visible_flow(s: Session, who: Identity, flow_id: str) -> dict[str, Any]:
    """The catalog's flow definition if `who` sees every agent it runs; else "no flow"."""
    found = await s.query(subjects.CORE_CATALOG_FLOWS_GET, {"id": flow_id})
    if not sees_flow(who, found.get("definition") or {}):
        raise _not_found("flow", flow_id)
    return found


async def visible_agent(s: Session, who: Identity, agent_id: str) -> dict[str, Any]:
    """The catalog's agent definition if `who` sees it; else "no agent"."""
    if not who.sees(agent_id):
        raise _not_found("agent", agent_id)
    return await s.query(subjects.CORE_CATALOG_AGENTS_GET, {"id": agent_id})


def filter_agents(who: Identity, listing: dict[str, Any]) -> dict[str, Any]:
    if not who.scoped:
        return listing
    agents = [
        a for a in listing.get("agents", []) if who.sees((a.get("definition") or {}).get("id"))
    ]
    return {**listing, "agents": agents}


def filter_flows(who: Identity, listing: dict[str, Any]) -> dict[str, Any]:
    if not who.scoped:
        return listing
    flows = [f for f in listing.get("flows", []) if sees_flow(who, f.get("definition") or {})]
    return {**listing, "flows": flows}


def filter_approvals(who: Identity, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if who.sees(r.get("agent_id"))] if who.scoped else rows


async def _agents_of(s: Session, run_ids: set[str]) -> dict[str, str | None]:
    """Each run's agent as core projects it (None: core does not know the run yet)."""

    async def one(run_id: str) -> tuple[str, str | None]:
        try:
            row = await s.get_run(run_id)
        except CliError as exc:
            if exc.code is ExitCode.NOT_FOUND:
                return run_id, None
            raise
        return run_id, row.get("agent_id")

    return dict(await asyncio.gather(*(one(r) for r in sorted(run_ids))))


async def filter_board(s: Session, who: Identity, board: dict[str, Any]) -> dict[str, Any]:
    """The board with only the runs `who` sees, and only the tasks left with one of them (a
    task's title is its run's input, in short)."""
    if not who.scoped:
        return board
    tasks = board.get("tasks", [])
    ids: set[str] = set()
    for task in tasks:
        current = task.get("current_run")
        if current:
            ids.add(current["run_id"])
        ids.update(r["run_id"] for r in task.get("past_runs", []))
    agents = await _agents_of(s, ids)

    def seen(ref: dict[str, Any]) -> bool:
        agent = ref.get("agent_id") if "agent_id" in ref else agents.get(ref["run_id"])
        return who.sees(agent)

    kept = []
    for task in tasks:
        current = task.get("current_run")
        shown = {
            **task,
            "current_run": current if current and seen(current) else None,
            "past_runs": [r for r in task.get("past_runs", []) if seen(r)],
            "child_runs": [r for r in task.get("child_runs", []) if seen(r)],
        }
        if shown["current_run"] or shown["past_runs"] or shown["child_runs"]:
            kept.append(shown)
    return {**board, "tasks": kept}


def check_memory_scope(who: Identity, scope: str) -> None:
    """A scoped token reads and writes only `agent:<id>` memories of agents it sees."""
    if not who.scoped:
        return
    kind, _, value = scope.partition(":")
    if kind == AGENT_MEMORY and who.sees(value):
        return
    raise CliError(
        f"memory scope {scope!r} is outside this token's agents (use agent:<id> of one of them)"
    )


def check_unscoped(who: Identity, tool: str) -> None:
    """Refuse a tool whose answer spans every agent (dead letters) to a scoped token."""
    if who.scoped:
        raise CliError(f"{tool} needs a token that is not scoped to agents")
