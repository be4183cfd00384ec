"""A model call's reservation and a run's admission (docs/spend.md "Reservations, settlement
and crashes"): one PostgreSQL transaction each, which locks the ledger rows of the covering
budgets' keys in sorted order, decides (`nexus_spend.decide`) and writes the hold or the
admission; a WAIT's new ask is published after the commit, under ids derived from the ask,
so replicas and runs reaching the same scope at once open it once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import asyncpg
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import decode
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import BUDGETS
from nexus_events.errors import NexusError
from nexus_events.events import ApprovalRequested, BudgetAskOpened
from nexus_events.events.budgets import BUDGET_ASK_TOOL, BudgetDefinition, BudgetEvent
from nexus_events.events.spend import SpendDecision, SpendReserve, SpendVerdict
from nexus_events.runtime.clock import Clock
from nexus_events.transport.bus import Bus
from nexus_events.transport.projection import Conn, quote_ident

from nexus_spend.coverage import Coverage, LedgerKey, RunScopes, call_keys, covering
from nexus_spend.decide import (
    ASK_APPROVAL_ID,
    AskToOpen,
    BudgetFacts,
    Decision,
    Usage,
    decide_admit,
    decide_reserve,
    extension_words,
)
from nexus_spend.run_scopes import RunScopesReader
from nexus_spend.schema import LIVE_SCHEMA, SCHEMA
from nexus_spend.standing import assemble, key_columns, read_live, read_records

log = logging.getLogger(__name__)

# A transaction that lost a deadlock or a serialization check is simply run again.
TRANSACTION_ATTEMPTS = 5
_RETRYABLE = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)

# Parsed budget definitions kept (by id and revision); past it the cache starts again.
CACHED_DEFINITIONS = 1000

T = TypeVar("T")


def opened_msg_id(ask_id: str) -> str:
    return f"spend:{ask_id}:opened"


def requested_msg_id(ask_id: str) -> str:
    return f"spend:{ask_id}:requested"


class Reservations:
    """`reserve` (the runner, before each model call) and `admit` (the scheduler, before
    dispatch). Any number of replicas may answer: the row locks serialize them."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        bus: Bus,
        clock: Clock,
        *,
        schema: str = SCHEMA,
        live_schema: str = LIVE_SCHEMA,
    ) -> None:
        self.pool = pool
        self.bus = bus
        self.clock = clock
        self.schema = schema
        self.live_schema = live_schema
        self.q = quote_ident(schema)
        self.lq = quote_ident(live_schema)
        self.runs = RunScopesReader(pool, bus.js, schema=schema)
        self._definitions: dict[tuple[str, int], BudgetDefinition] = {}

    async def reserve(self, run_id: str, request: SpendReserve) -> SpendVerdict:
        scopes = await self.runs.scopes(run_id)
        if scopes is None:
            return _unknown(run_id)
        estimate = Usage(request.cost_usd, request.tokens)

        async def transaction(conn: Conn) -> Decision:
            coverages, facts = await self._locked_facts(conn, scopes, turn=request.turn)
            decision = decide_reserve(facts, estimate)
            if decision.verdict.decision is SpendDecision.GRANTED:
                await self._hold(conn, run_id, request.turn, coverages, estimate)
            return decision

        return await self._decided(run_id, await self._in_transaction(transaction))

    async def admit(self, run_id: str) -> SpendVerdict:
        scopes = await self.runs.scopes(run_id)
        if scopes is None:
            return _unknown(run_id)

        async def transaction(conn: Conn) -> Decision:
            _, facts = await self._locked_facts(conn, scopes)
            decision = decide_admit(facts)
            if decision.verdict.decision is SpendDecision.GRANTED:
                await self._admitted(conn, scopes)
            return decision

        return await self._decided(run_id, await self._in_transaction(transaction))

    # -- the transaction -------------------------------------------------------------------

    async def _in_transaction(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    return await fn(conn)
            except _RETRYABLE as exc:
                if attempt == TRANSACTION_ATTEMPTS:
                    raise
                log.info("reservation transaction retried (%s): %s", attempt, exc)
                await asyncio.sleep(0.01 * attempt)
        raise AssertionError("unreachable")

    async def _budgets(self, conn: Conn) -> list[tuple[BudgetDefinition, int]]:
        """Every budget not deleted, with its current revision; a definition is parsed once
        per revision (each model call of every run reads them all)."""
        rows = await conn.fetch(
            f"""SELECT budget_id, revision, definition FROM {self.q}.budgets
                WHERE NOT deleted ORDER BY budget_id"""
        )
        out = []
        for r in rows:
            key = (r["budget_id"], r["revision"])
            budget = self._definitions.get(key)
            if budget is None:
                budget = BudgetDefinition.model_validate_json(r["definition"])
                if len(self._definitions) >= CACHED_DEFINITIONS:
                    self._definitions.clear()
                self._definitions[key] = budget
            out.append((budget, r["revision"]))
        return out

    async def _locked_facts(
        self, conn: Conn, scopes: RunScopes, *, turn: int | None = None
    ) -> tuple[list[Coverage], list[BudgetFacts]]:
        """The covering budgets and their facts, with their ledger rows made and locked
        (sorted, as settlement locks them: no two transactions wait on each other in a
        cycle). What only the projection writes (asks, extensions) is read before the lock;
        the ledger, holds and admissions, which reservations and settlement write under it,
        after."""
        budgets = await self._budgets(conn)
        coverages = covering(budgets, scopes, self.clock.now())
        keys = sorted({c.key for c in coverages})
        if not keys:
            return coverages, []
        records = await read_records(conn, coverages, schema=self.schema)
        cols = key_columns(keys)
        await conn.execute(
            f"""INSERT INTO {self.q}.ledger (scope, name, period, bucket)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
                ON CONFLICT DO NOTHING""",
            *cols,
        )
        # COLLATE "C": the byte order of UTF-8, which is Python's order of the same strings.
        # A row another transaction changed while this one waited is returned as it now is.
        rows = await conn.fetch(
            f"""SELECT l.* FROM {self.q}.ledger l
                JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[])
                    AS k(scope, name, period, bucket) USING (scope, name, period, bucket)
                ORDER BY l.scope COLLATE "C", l.name COLLATE "C", l.period COLLATE "C",
                    l.bucket COLLATE "C"
                FOR UPDATE OF l""",
            *cols,
        )
        spent = {
            LedgerKey(r["scope"], r["name"], r["period"], r["bucket"]): Usage(
                r["cost_usd"], r["tokens"]
            )
            for r in rows
        }
        # A statement of its own, after the lock: its snapshot sees every hold committed by
        # the transactions this one waited for.
        held, runs = await read_live(
            conn, keys, run_id=scopes.run_id, turn=turn, live_schema=self.live_schema
        )
        return coverages, assemble(coverages, spent, held, runs, records)

    async def _hold(
        self, conn: Conn, run_id: str, turn: int, coverages: list[Coverage], estimate: Usage
    ) -> None:
        """The call's hold on every covering key, replacing the turn's earlier hold (one
        statement: upsert the keys, delete the turn's holds on any other key)."""
        keys = sorted({c.key for c in coverages})
        if not keys:
            await conn.execute(
                f"DELETE FROM {self.lq}.holds WHERE run_id = $1 AND turn = $2", run_id, turn
            )
            return
        await conn.execute(
            f"""WITH held AS (
                    INSERT INTO {self.lq}.holds (run_id, turn, scope, name, period, bucket,
                        cost_usd, tokens, held_at)
                    SELECT $1, $2, k.*, $7, $8, $9
                    FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS k
                    ON CONFLICT (run_id, turn, scope, name, period, bucket) DO UPDATE
                        SET cost_usd = EXCLUDED.cost_usd, tokens = EXCLUDED.tokens,
                            held_at = EXCLUDED.held_at
                    RETURNING scope, name, period, bucket)
                DELETE FROM {self.lq}.holds h WHERE h.run_id = $1 AND h.turn = $2
                    AND (h.scope, h.name, h.period, h.bucket) NOT IN (SELECT * FROM held)""",
            run_id,
            turn,
            *key_columns(keys),
            estimate.cost_usd,
            estimate.tokens,
            self.clock.now(),
        )

    async def _admitted(self, conn: Conn, scopes: RunScopes) -> None:
        """The run counted once on every key it has (a runs budget applied later in the
        period sees it too)."""
        await conn.execute(
            f"""INSERT INTO {self.lq}.admissions (run_id, scope, name, period, bucket,
                    admitted_at)
                SELECT $1, k.*, $6
                FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS k
                ON CONFLICT DO NOTHING""",
            scopes.run_id,
            *key_columns(call_keys(scopes, self.clock.now())),
            self.clock.now(),
        )

    # -- after the commit ------------------------------------------------------------------

    async def _decided(self, run_id: str, decision: Decision) -> SpendVerdict:
        verdict = decision.verdict
        if decision.ask is None:
            return verdict
        closed = await self._already_decided(decision.ask.ask_id)
        if closed is not None:
            # The projection has not folded the ask's outcome yet: its last word stands.
            head = verdict.message.split("; ", 1)[0]
            told = "closed" if closed is SpendDecision.STOP else "approved, being recorded"
            message = f"{head}; the ask to extend it was {told} ({decision.ask.ask_id})"
            return verdict.model_copy(update={"decision": closed, "message": message})
        await self._open(run_id, decision.ask)
        return verdict

    async def _already_decided(self, ask_id: str) -> SpendDecision | None:
        """STOP if NEXUS_BUDGETS already closed the ask, WAIT if it extended the budget (the
        next reservation sees the extension), None if neither (open it)."""
        for event, answer in (
            (BudgetEvent.ASK_CLOSED, SpendDecision.STOP),
            (BudgetEvent.EXTENDED, SpendDecision.WAIT),
        ):
            try:
                raw = await self.bus.js.get_last_msg(BUDGETS, subjects.budget_event(ask_id, event))
            except nats.js.errors.NotFoundError:
                continue
            try:
                decode(raw.subject or "", raw.data or b"", dict(raw.headers or {}))
            except NexusError:
                continue
            return answer
        return None

    async def _open(self, run_id: str, ask: AskToOpen) -> None:
        """Publish the ask (its record first: surfaces read its approvers from it) and its
        approval request. Both ids derive from the ask: published once however many ask."""
        f = ask.facts
        budget, key = f.budget, f.coverage.key
        expires_at = self.clock.now() + timedelta(seconds=budget.ask.expires_in)
        opened = BudgetAskOpened(
            budget_id=budget.id,
            revision=f.coverage.revision,
            instance=key.instance,
            bucket=key.bucket,
            ask_id=ask.ask_id,
            round=ask.round,
            approval_id=ASK_APPROVAL_ID,
            extend_cost_usd=budget.ask.extend_cost_usd,
            extend_tokens=budget.ask.extend_tokens,
            extend_runs=budget.ask.extend_runs,
            approvers=budget.approvers(),
            spent_cost_usd=f.spent.cost_usd,
            limit_cost_usd=f.limit_cost(),
            expires_at=expires_at,
            asked_for_run=run_id,
        )
        await self.bus.publish(
            subjects.budget_event(ask.ask_id, BudgetEvent.ASK_OPENED),
            opened,
            msg_id=opened_msg_id(ask.ask_id),
        )
        requested = ApprovalRequested(
            approval_id=ASK_APPROVAL_ID,
            tool=BUDGET_ASK_TOOL,
            summary=extension_words(f),
            why=f"budget {budget.id} is reached for {key.instance} in {key.bucket}",
            expires_at=expires_at,
        )
        await self.bus.publish(
            subjects.run_event(ask.ask_id, RunEvent.APPROVAL_REQUESTED),
            requested,
            msg_id=requested_msg_id(ask.ask_id),
        )
        log.info(
            "budget %s: ask %s opened for %s %s", budget.id, ask.ask_id, key.instance, key.bucket
        )


def _unknown(run_id: str) -> SpendVerdict:
    return SpendVerdict(decision=SpendDecision.STOP, message=f"run {run_id} is unknown")


__all__ = ["TRANSACTION_ATTEMPTS", "Reservations", "opened_msg_id", "requested_msg_id"]
