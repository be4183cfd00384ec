"""A budget ask as the spend service opens one (docs/spend.md), for the surfaces' tests: its
record on NEXUS_BUDGETS (the approvers) and its `approval_requested` on the ask's pseudo-run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import ApprovalRequested
from nexus_events.events.budgets import (
    BUDGET_ASK_TOOL,
    BudgetAskOpened,
    BudgetEvent,
    ask_id,
)
from nexus_events.transport.bus import Bus

ASK_APPROVAL_ID = "extend-1"


async def open_budget_ask(
    bus: Bus, *, budget_id: str = "alpha-monthly", team: str = "alpha", approvers: list[str]
) -> str:
    """Open round 1 of `budget_id`'s ask for team:`team` this month; the ask's pseudo-run id."""
    bucket = datetime.now(UTC).strftime("%Y-%m")
    instance = f"team:{team}"
    ask = ask_id(budget_id, instance, bucket, 1)
    expires = datetime.now(UTC) + timedelta(minutes=30)
    opened = BudgetAskOpened(
        budget_id=budget_id,
        revision=1,
        instance=instance,
        bucket=bucket,
        ask_id=ask,
        round=1,
        approval_id=ASK_APPROVAL_ID,
        extend_cost_usd=10.0,
        approvers=approvers,
        spent_cost_usd=50.02,
        limit_cost_usd=50.0,
        expires_at=expires,
        asked_for_run="run_alpha_1",
    )
    await bus.publish(subjects.budget_event(ask, BudgetEvent.ASK_OPENED), opened)
    asked = ApprovalRequested(
        approval_id=ASK_APPROVAL_ID,
        tool=BUDGET_ASK_TOOL,
        summary=f"extend {instance}'s {budget_id} by $10 for {bucket}",
        why=f"{instance} reached $50.02 of $50.00",
        expires_at=expires,
    )
    await bus.publish(subjects.run_event(ask, RunEvent.APPROVAL_REQUESTED), asked)
    return ask
