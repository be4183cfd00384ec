"""Folds budgets (NEXUS_CATALOG ``budget.*``) and the service's own record (NEXUS_BUDGETS:
asks, extensions, thresholds) into the projection's tables, and reads the live budgets back."""

from __future__ import annotations

from datetime import datetime

from nexus_events.contract.codec import Decoded
from nexus_events.events import (
    BudgetApplied,
    BudgetAskClosed,
    BudgetAskOpened,
    BudgetDeleted,
    BudgetExtended,
    BudgetThresholdCrossed,
)
from nexus_events.events.budgets import BudgetDefinition
from nexus_events.transport.projection import Conn

from nexus_spend.decide import AskState


async def fold_budget(conn: Conn, q: str, d: Decoded) -> bool:
    """A catalog budget event; True when it was one. An apply is the budget's next revision
    (counted as the lab counts suite revisions); a delete keeps the revisions."""
    event = d.event
    if not isinstance(event, BudgetApplied | BudgetDeleted):
        return False
    budget_id = d.address.ids.get("id")
    if budget_id is None:
        return True
    at = d.envelope.timestamp
    if isinstance(event, BudgetDeleted):
        await conn.execute(
            f"UPDATE {q}.budgets SET deleted = true, updated_at = $2 WHERE budget_id = $1",
            budget_id,
            at,
        )
        return True
    if event.budget.id != budget_id:
        return True  # on another budget's subject: not this budget's revision (as core's flows)
    definition = event.budget.model_dump_json()
    revision = await conn.fetchval(
        f"""INSERT INTO {q}.budgets (budget_id, revision, deleted, definition, updated_at)
            VALUES ($1, 1, false, $2, $3)
            ON CONFLICT (budget_id) DO UPDATE SET revision = budgets.revision + 1,
                deleted = false, definition = EXCLUDED.definition,
                updated_at = EXCLUDED.updated_at
            RETURNING revision""",
        budget_id,
        definition,
        at,
    )
    await conn.execute(
        f"""INSERT INTO {q}.budget_revisions (budget_id, revision, definition, applied_by,
                applied_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""",
        budget_id,
        revision,
        definition,
        event.applied_by,
        at,
    )
    return True


async def fold_record(conn: Conn, q: str, d: Decoded) -> bool:
    """An event of NEXUS_BUDGETS; True when it was one."""
    e = d.event
    at = d.envelope.timestamp
    if isinstance(e, BudgetAskOpened):
        await conn.execute(
            f"""INSERT INTO {q}.asks (ask_id, budget_id, revision, instance, bucket, round,
                    state, approval_id, expires_at, opened_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING""",
            e.ask_id,
            e.budget_id,
            e.revision,
            e.instance,
            e.bucket,
            e.round,
            AskState.OPEN,
            e.approval_id,
            e.expires_at,
            at,
        )
    elif isinstance(e, BudgetExtended):
        await conn.execute(
            f"""INSERT INTO {q}.extensions (ask_id, budget_id, revision, instance, bucket,
                    cost_usd, tokens, runs) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                ON CONFLICT DO NOTHING""",
            e.ask_id,
            e.budget_id,
            e.revision,
            e.instance,
            e.bucket,
            e.cost_usd,
            e.tokens,
            e.runs,
        )
        await _close_ask(conn, q, e.ask_id, AskState.APPROVED, at=at, by=e.decided_by)
    elif isinstance(e, BudgetAskClosed):
        await _close_ask(conn, q, e.ask_id, AskState(e.decision), at=at, by=e.decided_by)
    elif isinstance(e, BudgetThresholdCrossed):
        await conn.execute(
            f"""INSERT INTO {q}.thresholds (budget_id, revision, instance, bucket)
                VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING""",
            e.budget_id,
            e.revision,
            e.instance,
            e.bucket,
        )
    else:
        return False
    return True


async def _close_ask(
    conn: Conn, q: str, ask_id: str, state: AskState, *, at: datetime | None, by: str | None
) -> None:
    # Only an open ask closes: an approval recorded after an expiry (or the reverse) keeps the
    # first outcome, as the decision consumer's first answer wins.
    await conn.execute(
        f"""UPDATE {q}.asks SET state = $2, closed_at = $3, decided_by = $4
            WHERE ask_id = $1 AND state = $5""",
        ask_id,
        state,
        at,
        by,
        AskState.OPEN,
    )


async def live_budgets(conn: Conn, q: str) -> list[tuple[BudgetDefinition, int]]:
    """Every budget not deleted, with its current revision, by id."""
    rows = await conn.fetch(
        f"SELECT definition, revision FROM {q}.budgets WHERE NOT deleted ORDER BY budget_id"
    )
    return [(BudgetDefinition.model_validate_json(r["definition"]), r["revision"]) for r in rows]
