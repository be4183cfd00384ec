"""The projection ``spend``: runs and their model calls, the ledger, budgets and the service's
record folded from NEXUS_RUNS, NEXUS_CATALOG and NEXUS_BUDGETS; settles holds as calls land.

Per batch, in the batch's transaction (with the checkpoint): runs rows, each call keyed so a
repeat counts once with its larger usage, the ledger deltas summed per key and written in key
order (the order reservations lock the same rows in), then the holds the batch's turns and
endings settle. What it would announce (thresholds) and count (metrics) waits in `staged` until
the runner has committed the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent
from nexus_events.contract.streams import BUDGETS, CATALOG, RUNS
from nexus_events.events import RunPrepared, RunRequested, RunStarted, RunTurn, TerminalEvent
from nexus_events.transport.projection import Conn, Source, quote_ident
from nexus_events.transport.publish import Outgoing

from nexus_spend import schema as tables
from nexus_spend.budget_record import fold_budget, fold_record, live_budgets
from nexus_spend.coverage import RunScopes, call_keys
from nexus_spend.thresholds import crossed
from nexus_spend.usage_fold import CallUsage, LedgerDeltas, model_call, settle

SCHEMA = tables.SCHEMA

_RUN_EVENTS = (
    RunEvent.REQUESTED,
    RunEvent.PREPARED,
    RunEvent.STARTED,
    RunEvent.TURN,
    RunEvent.CONDENSED,
    *TERMINAL_EVENTS,
)


@dataclass(frozen=True, slots=True)
class CallCounted:
    """A call's addition to the metrics (by the run's team, agent and model)."""

    team: str | None
    agent: str | None
    model: str | None
    usage: CallUsage
    new_call: bool


@dataclass(slots=True)
class Staged:
    """What a committed batch announces and counts: staged by NEXUS_RUNS batches only, and
    taken by that feed alone (`SpendRunner.handle`)."""

    announcements: dict[str, Outgoing] = field(default_factory=dict)
    counted: list[CallCounted] = field(default_factory=list)


@dataclass(slots=True)
class _Batch:
    ledger: LedgerDeltas = field(default_factory=LedgerDeltas)
    touched: list[tuple[RunScopes, datetime]] = field(default_factory=list)
    settled_turn: dict[str, int] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    counted: list[CallCounted] = field(default_factory=list)


class SpendProjection:
    """Folds usage, the ledger and budgets; `live_schema` holds the holds it settles."""

    name = "spend"
    sources: tuple[Source, ...] = (
        Source(RUNS, tuple(subjects.run_events_filter(None, e) for e in _RUN_EVENTS)),
        Source(CATALOG, (subjects.catalog_events_filter(subjects.CatalogKind.BUDGET),)),
        Source(BUDGETS),
    )

    def __init__(self, schema: str = SCHEMA, live_schema: str = tables.LIVE_SCHEMA) -> None:
        self.schema = schema
        self.live_schema = live_schema
        self.staged = Staged()

    def take_staged(self) -> Staged:
        staged, self.staged = self.staged, Staged()
        return staged

    async def create(self, conn: Conn, schema: str) -> None:
        await tables.create_projection_tables(conn, schema)
        await tables.create_live_tables(conn, self.live_schema)

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        q = quote_ident(schema)
        b = _Batch()
        for d in batch:
            if await fold_budget(conn, q, d) or await fold_record(conn, q, d):
                continue
            run_id = d.address.ids.get("run_id")
            if run_id is not None:
                await self._run_event(conn, q, d, run_id, b)
        for key, delta in b.ledger.in_order():
            await conn.execute(
                f"""INSERT INTO {q}.ledger (scope, name, period, bucket, cost_usd, tokens, calls)
                    VALUES ($1, $2, $3, $4, $5, $6, $7)
                    ON CONFLICT (scope, name, period, bucket) DO UPDATE SET
                        cost_usd = ledger.cost_usd + EXCLUDED.cost_usd,
                        tokens = ledger.tokens + EXCLUDED.tokens,
                        calls = ledger.calls + EXCLUDED.calls""",
                key.scope,
                key.name,
                key.period,
                key.bucket,
                delta.cost_usd,
                delta.tokens,
                delta.calls,
            )
        await self._settle_holds(conn, b)
        if schema != self.schema:
            return  # a rebuild: its past was announced and counted when it happened
        if b.touched:
            budgets = await live_budgets(conn, q)
            for out in await crossed(conn, q, budgets, b.touched):
                self.staged.announcements[out.msg_id or ""] = out
        self.staged.counted.extend(b.counted)

    async def _settle_holds(self, conn: Conn, b: _Batch) -> None:
        # After the ledger rows are locked and updated: a reservation locks those rows before it
        # writes a hold, so it waits for this commit rather than crossing it.
        live = quote_ident(self.live_schema)
        for run_id, turn in sorted(b.settled_turn.items()):
            if run_id not in b.ended:
                await conn.execute(
                    f"DELETE FROM {live}.holds WHERE run_id = $1 AND turn <= $2", run_id, turn
                )
        for run_id in sorted(b.ended):
            await conn.execute(f"DELETE FROM {live}.holds WHERE run_id = $1", run_id)

    async def _run_event(self, conn: Conn, q: str, d: Decoded, run_id: str, b: _Batch) -> None:
        e = d.event
        at = d.envelope.timestamp
        if isinstance(e, RunRequested):
            await _requested(conn, q, run_id, e, seq=d.envelope.stream_seq or 0, at=at)
        elif isinstance(e, RunPrepared):
            c = e.config
            await _ensure_run(conn, q, run_id, d.envelope.stream_seq or 0, at)
            await conn.execute(
                f"""UPDATE {q}.runs SET team = COALESCE($2, team), agent_id = $3,
                        agent_revision = $4, model = $5, task_id = COALESCE(task_id, $6)
                    WHERE run_id = $1""",
                run_id,
                c.team,
                c.agent_id,
                c.catalog_revisions.get(f"agent/{c.agent_id}"),
                c.model.name,
                c.task_id,
            )
        elif isinstance(e, RunStarted):
            await conn.execute(
                f"UPDATE {q}.runs SET started_at = COALESCE(started_at, $2) WHERE run_id = $1",
                run_id,
                at,
            )
        elif isinstance(e, TerminalEvent):
            await conn.execute(
                f"""UPDATE {q}.runs SET status = $2, ended_at = $3::timestamptz,
                        wall_seconds = COALESCE(
                            EXTRACT(EPOCH FROM ($3::timestamptz - started_at)), 0)
                    WHERE run_id = $1""",
                run_id,
                e.status,
                at,
            )
            b.ended.add(run_id)
        else:
            await self._call(conn, q, d, run_id, b)

    async def _call(self, conn: Conn, q: str, d: Decoded, run_id: str, b: _Batch) -> None:
        call = model_call(d.event)
        if call is None:
            return
        call_key, usage = call
        at = d.envelope.timestamp
        old = await conn.fetchrow(
            f"""SELECT at, tokens_in, tokens_out, cost_usd FROM {q}.run_calls
                WHERE run_id = $1 AND call_key = $2""",
            run_id,
            call_key,
        )
        # The call's time is its first publication's: a repeat settles under the same keys.
        call_at = at if old is None else old["at"]
        if call_at is None:
            return  # an event without its JetStream time: nothing to bucket it under
        before = (
            None if old is None else CallUsage(old["tokens_in"], old["tokens_out"], old["cost_usd"])
        )
        settled = settle(before, usage)
        if isinstance(d.event, RunTurn):
            b.settled_turn[run_id] = max(d.event.turn, b.settled_turn.get(run_id, 0))
        if settled.delta.is_zero() and not settled.new_call:
            return
        await conn.execute(
            f"""INSERT INTO {q}.run_calls (run_id, call_key, at, tokens_in, tokens_out, cost_usd)
                VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (run_id, call_key) DO UPDATE SET tokens_in = EXCLUDED.tokens_in,
                    tokens_out = EXCLUDED.tokens_out, cost_usd = EXCLUDED.cost_usd""",
            run_id,
            call_key,
            call_at,
            settled.stored.tokens_in,
            settled.stored.tokens_out,
            settled.stored.cost_usd,
        )
        await _ensure_run(conn, q, run_id, d.envelope.stream_seq or 0, call_at)
        row = await conn.fetchrow(
            f"""UPDATE {q}.runs SET calls = calls + $2, tokens_in = tokens_in + $3,
                    tokens_out = tokens_out + $4, cost_usd = cost_usd + $5
                WHERE run_id = $1
                RETURNING team, agent_id, task_id, flow, flow_run_id, model""",
            run_id,
            int(settled.new_call),
            settled.delta.tokens_in,
            settled.delta.tokens_out,
            settled.delta.cost_usd,
        )
        assert row is not None  # _ensure_run made it
        scopes = RunScopes(
            run_id,
            agent_id=row["agent_id"],
            team=row["team"],
            task_id=row["task_id"],
            flow=row["flow"],
            flow_run_id=row["flow_run_id"],
        )
        b.ledger.add(call_keys(scopes, call_at), settled)
        b.touched.append((scopes, call_at))
        b.counted.append(
            CallCounted(row["team"], row["agent_id"], row["model"], settled.delta, settled.new_call)
        )


async def _ensure_run(conn: Conn, q: str, run_id: str, seq: int, at: datetime | None) -> None:
    """A run row from what there is: a turn published by hand may come before its request."""
    await conn.execute(
        f"""INSERT INTO {q}.runs (run_id, first_seq, day)
            VALUES ($1, $2, ($3::timestamptz AT TIME ZONE 'UTC')::date)
            ON CONFLICT (run_id) DO NOTHING""",
        run_id,
        seq,
        at,
    )


async def _requested(
    conn: Conn, q: str, run_id: str, e: RunRequested, *, seq: int, at: datetime | None
) -> None:
    labels = e.labels
    await conn.execute(
        f"""INSERT INTO {q}.runs (run_id, first_seq, team, agent_id, task_id, flow, flow_run_id,
                origin, requested_at, day)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, ($9::timestamptz AT TIME ZONE 'UTC')::date)
            ON CONFLICT (run_id) DO UPDATE SET team = COALESCE(runs.team, EXCLUDED.team),
                agent_id = COALESCE(runs.agent_id, EXCLUDED.agent_id),
                task_id = COALESCE(runs.task_id, EXCLUDED.task_id),
                flow = EXCLUDED.flow, flow_run_id = EXCLUDED.flow_run_id,
                origin = EXCLUDED.origin, requested_at = EXCLUDED.requested_at,
                day = EXCLUDED.day""",
        run_id,
        seq,
        e.team,
        e.agent_id,
        e.task_id,
        labels.get("flow"),
        labels.get("flow_run_id"),
        e.origin,
        at,
    )
