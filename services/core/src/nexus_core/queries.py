"""Core's read side over NATS request/reply, as the `nexus-core` nats.micro service.

Every endpoint takes a JSON object (an empty body means ``{}``) and answers JSON, errors
included: a nats.micro error reply (``Nats-Service-Error-Code`` 400/404/500) whose body is
``{"error": {"code", "message", "fields": [{"loc", "msg"}]}}``, never an empty body or a
timeout. Bodies are validated (the contract's `nexus_events.events.queries`, parsed by
`nexus_core.query_models`) before anything reaches PostgreSQL or JetStream; a handler that
fails anyway answers 500 and logs the request.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, cast

import asyncpg
from nats.micro.service import Service
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import RUNS
from nexus_events.events.lab_specs import LabMode
from nexus_events.events.queries import CatalogKind
from nexus_events.runtime.leadership import LeadershipStatus
from nexus_events.transport import micro
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import Handler
from nexus_events.transport.projection import Projection, projection_status, quote_ident, rebuild
from pydantic import BaseModel

from nexus_core.board_projection import BOARD_SCHEMA, BoardProjection
from nexus_core.canary_views import canary_view, decided_agents
from nexus_core.catalog_store import CatalogStore, StoredAgent, StoredFlow, StoredSkill
from nexus_core.errors import QueryError
from nexus_core.query_models import (
    MAX_PAGE,
    AgentGet,
    BoardGet,
    CatalogHistory,
    EmptyQuery,
    FlowDefinitionGet,
    ProjectionRebuild,
    RunsEvents,
    RunsGet,
    RunsList,
    SkillGet,
    UsageSummary,
)
from nexus_core.run_state import RunRow
from nexus_core.runs_projection import RUNS_SCHEMA, AgentRunsProjection
from nexus_core.usage_summary import usage_sql

log = logging.getLogger(__name__)

SERVICE_NAME = "nexus-core"
# Queries validate, answer and fail as every nexus micro service does
# (nexus_events.transport.micro).
endpoint_handler = functools.partial(micro.endpoint_handler, service="core")

__all__ = [
    "MAX_PAGE",
    "SERVICE_NAME",
    "CoreQueries",
    "endpoint_handler",
    "run_view",
]


def run_view(row: RunRow, forks: Sequence[str] = ()) -> dict[str, Any]:
    """A run as queries show it; `forks`: the lab runs prepared from it, oldest first."""
    lab_mode, divergence = row.lab_mode, row.divergence
    return {
        "run_id": row.run_id,
        "status": row.status,
        "reason": row.reason,
        "message": row.message,
        "agent_id": row.agent_id,
        "task_id": row.task_id,
        "origin": row.origin,
        "input": row.input,
        "requested_by": row.requested_by,
        "parent_run_id": row.parent_run_id,
        "attempt": row.attempt,
        "max_attempts": row.max_attempts,
        "condensations": row.condensations,
        "runtime": row.runtime,
        "runtime_handle": row.runtime_handle,
        "queue_position": row.queue_position,
        "catalog_revisions": row.catalog_revisions,
        "phases": {k: v.isoformat() for k, v in row.phases.items()},
        "ended_at": row.ended_at.isoformat() if row.ended_at else None,
        "last_event_at": row.last_event_at.isoformat() if row.last_event_at else None,
        "turns": row.turn_count,
        "tokens_in": row.tokens_in,
        "tokens_out": row.tokens_out,
        "cost_usd": row.cost_usd,
        "result": row.result,
        "last_seq": row.last_seq,
        "labels": row.labels,
        "replay_of": row.lab_source if lab_mode == LabMode.REPLAY else None,
        "forked_from": row.lab_source if lab_mode == LabMode.FORK else None,
        "fork_turn": row.lab.get("at_turn") if row.lab and lab_mode == LabMode.FORK else None,
        "forks": list(forks),
        "golden": row.golden,
        "diverged_at": None if divergence is None else divergence[1],
        "divergence": None if divergence is None else divergence[2],
        "canary_arm": row.canary_arm,
        "team": row.team,
        "budget_wait": row.budget_wait,
        "sleeping_until": row.sleeping_until.isoformat() if row.sleeping_until else None,
        "sleep_reason": row.sleep_reason,
    }


def forks_sql(runs: str, alias: str) -> str:
    """A scalar subquery: the JSON array of the lab runs prepared from `alias`'s run."""
    return (
        "(SELECT COALESCE(jsonb_agg(f.run_id ORDER BY f.first_seq, f.run_id), '[]'::jsonb)"
        f" FROM {runs}.agent_runs f WHERE f.lab_source = {alias}.run_id"
        " AND f.prepared_at IS NOT NULL)"
    )


# What runs.list's `text` looks in.
TEXT_COLUMNS = ("run_id", "agent_id", "task_id", "input", "requested_by")


def like_pattern(text: str) -> str:
    """An ILIKE pattern (escape character backslash) matching `text` anywhere, literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _board_run(run_id: str, statuses: dict[str, Any]) -> dict[str, Any]:
    known = statuses.get(run_id) or {}
    return {"run_id": run_id, "status": known.get("status"), "attempt": known.get("attempt")}


def _agent_view(a: StoredAgent) -> dict[str, Any]:
    return {"revision": a.revision, "definition": a.definition.model_dump(mode="json")}


def _flow_view(f: StoredFlow) -> dict[str, Any]:
    return {"revision": f.revision, "definition": f.definition.model_dump(mode="json")}


def _skill_view(s: StoredSkill) -> dict[str, Any]:
    return {"revision": s.revision, "skill": s.skill.model_dump(mode="json")}


class CoreQueries:
    """The query endpoints; `start` registers them as the `nexus-core` micro service."""

    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        catalog: CatalogStore,
        *,
        runs_schema: str = RUNS_SCHEMA,
        board_schema: str = BOARD_SCHEMA,
        leadership: Callable[[], LeadershipStatus] | None = None,
    ) -> None:
        self.bus = bus
        # This replica's role and who holds the lease (`projections.status` says it).
        self.leadership = leadership
        self.pool = pool
        self.catalog = catalog
        self.runs = quote_ident(runs_schema)
        self.runs_schema = runs_schema
        self.board = quote_ident(board_schema)
        # Core's own read models: `projections.status` and `projections.rebuild` act on these,
        # so nobody else ever writes core's schemas.
        self.projections: dict[str, Projection] = {
            "agent_runs": AgentRunsProjection(runs_schema),
            "board": BoardProjection(board_schema),
        }
        self.service: Service | None = None

    async def start(self) -> None:
        h = endpoint_handler
        endpoints: list[tuple[str, str, Handler]] = [
            ("runs-get", subjects.CORE_RUNS_GET, h(RunsGet, self.runs_get)),
            ("runs-list", subjects.CORE_RUNS_LIST, h(RunsList, self.runs_list)),
            ("runs-events", subjects.CORE_RUNS_EVENTS, h(RunsEvents, self.runs_events)),
            ("board-get", subjects.CORE_BOARD_GET, h(BoardGet, self.board_get)),
            ("agents-list", subjects.CORE_CATALOG_AGENTS_LIST, h(EmptyQuery, self.agents)),
            ("agents-get", subjects.CORE_CATALOG_AGENTS_GET, h(AgentGet, self.agent)),
            ("skills-list", subjects.CORE_CATALOG_SKILLS_LIST, h(EmptyQuery, self.skills)),
            ("skills-get", subjects.CORE_CATALOG_SKILLS_GET, h(SkillGet, self.skill)),
            ("flows-list", subjects.CORE_CATALOG_FLOWS_LIST, h(EmptyQuery, self.flows)),
            ("flows-get", subjects.CORE_CATALOG_FLOWS_GET, h(FlowDefinitionGet, self.flow)),
            ("catalog-history", subjects.CORE_CATALOG_HISTORY, h(CatalogHistory, self.history)),
            ("usage-summary", subjects.CORE_USAGE_SUMMARY, h(UsageSummary, self.usage)),
            (
                "projections-status",
                subjects.CORE_PROJECTIONS_STATUS,
                h(EmptyQuery, self.projections_status),
            ),
            (
                "projections-rebuild",
                subjects.CORE_PROJECTIONS_REBUILD,
                h(ProjectionRebuild, self.projections_rebuild),
            ),
        ]
        self.service = await micro.start_service(
            self.bus.nc, SERVICE_NAME, "Nexus core: runs, board and catalog queries", endpoints
        )

    async def stop(self) -> None:
        await micro.stop_service(self.service)
        self.service = None

    # -- projections -----------------------------------------------------------------

    async def projections_status(self, _: EmptyQuery) -> dict[str, Any]:
        rows = []
        for name, projection in self.projections.items():
            for stream, pos in (await projection_status(self.bus, self.pool, projection)).items():
                rows.append({"projection": name, "stream": stream, **pos})
        reply: dict[str, Any] = {"projections": rows}
        if self.leadership is not None:
            reply["leadership"] = self.leadership().as_dict()
        return reply

    async def projections_rebuild(self, query: ProjectionRebuild) -> dict[str, Any]:
        """Replay into a fresh schema and swap it in (`nexus_events.transport.projection.rebuild`):
        readers see the old rows until the swap commits; the live runner carries on."""
        started = time.monotonic()
        name = query.projection.value
        applied = await rebuild(self.bus, self.pool, self.projections[name])
        return {"projection": name, "applied": applied, "seconds": time.monotonic() - started}

    # -- runs ------------------------------------------------------------------------

    async def runs_get(self, query: RunsGet) -> dict[str, Any]:
        row = await self.pool.fetchrow(
            f"SELECT a.doc, {forks_sql(self.runs, 'a')} AS forks"
            f" FROM {self.runs}.agent_runs a WHERE a.run_id = $1",
            query.run_id,
        )
        if row is None:
            raise QueryError(404, f"no run {query.run_id!r}")
        return run_view(RunRow.from_json(row["doc"]), json.loads(row["forks"]))

    async def runs_list(self, query: RunsList) -> dict[str, Any]:
        where: list[str] = []
        args: list[object] = []
        filters = {
            "status": query.status and query.status.value,
            "agent_id": query.agent_id,
            "task_id": query.task_id,
            "origin": query.origin and query.origin.value,
            "flow": query.flow,
            "flow_run_id": query.flow_run_id,
            "golden": query.golden,
        }
        for column, value in filters.items():
            if value is not None:
                args.append(value)
                where.append(f"{column} = ${len(args)}")
        if query.text is not None:
            args.append(like_pattern(query.text))
            matches = (f"{c} ILIKE ${len(args)} ESCAPE '\\'" for c in TEXT_COLUMNS)
            where.append(f"({' OR '.join(matches)})")
        if query.since is not None:
            args.append(query.since)
            where.append(f"COALESCE(requested_at, last_event_at) >= ${len(args)}")
        if query.cursor is not None:
            args.append(int(query.cursor))  # digits within bigint: RunsList checked
            where.append(f"first_seq < ${len(args)}")
        args.append(query.limit + 1)
        sql = (
            f"SELECT a.doc, {forks_sql(self.runs, 'a')} AS forks FROM {self.runs}.agent_runs a"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY first_seq DESC LIMIT ${len(args)}"
        )
        found = await self.pool.fetch(sql, *args)
        more = len(found) > query.limit
        found = found[: query.limit]
        rows = [RunRow.from_json(r["doc"]) for r in found]
        return {
            "runs": [run_view(r, json.loads(f["forks"])) for r, f in zip(rows, found, strict=True)],
            "next_cursor": str(rows[-1].first_seq) if more and rows else None,
        }

    async def runs_events(self, query: RunsEvents) -> dict[str, Any]:
        events = []
        replay = cast(
            AsyncGenerator[Decoded, None],
            self.bus.replay(RUNS, run_id=query.run_id, start_seq=query.from_seq),
        )
        async with contextlib.aclosing(replay) as stream:
            async for d in stream:
                events.append({
                    "seq": d.envelope.stream_seq,
                    "event": d.address.event,
                    "time": d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
                    "event_id": d.envelope.event_id,
                    "source": d.envelope.source,
                    "body": d.event.model_dump(mode="json", exclude_none=True),
                })  # fmt: skip
                if len(events) >= query.limit:
                    break
        return {"run_id": query.run_id, "events": events}

    async def usage(self, query: UsageSummary) -> dict[str, Any]:
        sql, args = usage_sql(f"{self.runs}.agent_runs", query)
        rows = [
            {
                "key": r["key"],
                "runs": r["runs"],
                "tokens_in": r["tokens_in"],
                "tokens_out": r["tokens_out"],
                "cost_usd": round(r["cost_usd"], 6),
                "turns": r["turns"],
            }
            for r in await self.pool.fetch(sql, *args)
        ]
        return {"by": query.by.value, "rows": rows}

    # -- board -----------------------------------------------------------------------

    async def board_get(self, query: BoardGet) -> dict[str, Any]:
        where: list[str] = []
        args: list[object] = []
        if not query.include_deleted:
            where.append("NOT t.deleted")
        if query.column is not None:
            args.append(query.column.value)
            where.append(f"t.board_column = ${len(args)}")
        # Attempts come from the agent_runs projection (same database, its own pace): a run it
        # has not folded yet shows none.
        rows = await self.pool.fetch(
            "SELECT t.*, (SELECT jsonb_object_agg(i.run_id,"
            " jsonb_build_object('status', i.status, 'attempt', a.attempt))"
            f" FROM {self.board}.run_index i LEFT JOIN {self.runs}.agent_runs a"
            " ON a.run_id = i.run_id WHERE i.task_id = t.task_id) AS statuses,"
            " (SELECT jsonb_agg(jsonb_build_object('run_id', c.run_id, 'status', c.status,"
            " 'attempt', a.attempt, 'agent_id', c.agent_id, 'parent_run_id', c.parent_run_id)"
            " ORDER BY c.requested_at, c.run_id)"
            f" FROM {self.board}.run_index c LEFT JOIN {self.runs}.agent_runs a"
            " ON a.run_id = c.run_id WHERE c.task_id = t.task_id"
            " AND c.parent_run_id IS NOT NULL) AS children"
            f" FROM {self.board}.tasks t"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY t.task_id",
            *args,
        )
        tasks = []
        for r in rows:
            statuses = json.loads(r["statuses"]) if r["statuses"] else {}
            runs = json.loads(r["runs"])
            current = r["current_run_id"]
            tasks.append({
                "task_id": r["task_id"],
                "title": r["title"],
                "column": r["board_column"],
                "labels": json.loads(r["labels"]),
                "deleted": r["deleted"],
                "current_run": None if current is None else _board_run(current, statuses),
                "past_runs": [_board_run(x, statuses) for x in runs if x != current],
                "child_runs": json.loads(r["children"]) if r["children"] else [],
                "updated_at": r["updated_at"].isoformat() if r["updated_at"] else None,
            })  # fmt: skip
        return {"tasks": tasks}

    # -- catalog ---------------------------------------------------------------------

    async def agents(self, _: EmptyQuery) -> dict[str, Any]:
        decided = await decided_agents(self.bus)
        return {
            "agents": [
                await self._agent_view(a, a.definition.id in decided)
                for a in await self.catalog.list_agents()
            ]
        }

    async def _agent_view(self, agent: StoredAgent, decided: bool) -> dict[str, Any]:
        view = _agent_view(agent)
        if agent.definition.canary is not None or decided:
            view["canary"] = await canary_view(
                self.bus, self.pool, self.runs_schema, agent, decided
            )
        return view

    async def agent(self, query: AgentGet) -> dict[str, Any]:
        found = await self.catalog.get_agent(query.id, query.revision)
        if found is None:
            what = query.id if query.revision is None else f"{query.id}@{query.revision}"
            raise QueryError(404, f"no agent {what!r}")
        return await self._agent_view(found, decided=True)

    async def history(self, query: CatalogHistory) -> dict[str, Any]:
        """Every revision, oldest first; none (not an error) for an item never applied, so a
        page can show an empty history without telling "unknown" from "no revisions"."""
        revisions: Sequence[tuple[int, bool, BaseModel | None]]
        if query.kind is CatalogKind.AGENT:
            revisions = await self.catalog.agent_history(query.id)
        elif query.kind is CatalogKind.SKILL:
            revisions = await self.catalog.skill_history(query.id)
        else:
            revisions = await self.catalog.flow_history(query.id)
        return {
            "kind": query.kind.value,
            "id": query.id,
            "revisions": [
                {
                    "revision": revision,
                    "deleted": deleted,
                    "definition": None if d is None else d.model_dump(mode="json"),
                }
                for revision, deleted, d in revisions
            ],
        }

    async def skills(self, _: EmptyQuery) -> dict[str, Any]:
        return {"skills": [_skill_view(s) for s in await self.catalog.list_skills()]}

    async def skill(self, query: SkillGet) -> dict[str, Any]:
        found = await self.catalog.get_skill(query.name, query.version)
        if found is None:
            what = query.name if query.version is None else f"{query.name}@{query.version}"
            raise QueryError(404, f"no skill {what!r}")
        return _skill_view(found)

    async def flows(self, _: EmptyQuery) -> dict[str, Any]:
        return {"flows": [_flow_view(f) for f in await self.catalog.list_flows()]}

    async def flow(self, query: FlowDefinitionGet) -> dict[str, Any]:
        found = await self.catalog.get_flow(query.id, query.revision)
        if found is None:
            what = query.id if query.revision is None else f"{query.id}@{query.revision}"
            raise QueryError(404, f"no flow {what!r}")
        return _flow_view(found)
