"""How a budget ask ends on real NATS and PostgreSQL: a denial closes the scope for the
period (later calls stop naming it), an unanswered ask expires unless a person claimed it."""

from __future__ import annotations

from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import BUDGETS, RUNS
from nexus_events.events import ApprovalDecided, ApprovalDecision, BudgetAskClosed
from nexus_events.events.budgets import BudgetDefinition, BudgetEvent
from nexus_events.events.spend import SpendDecision, StandingState
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.approvals import claim_approval, held_claim
from nexus_events.transport.bus import Bus

from nexus_spend.asks import AskDecisions, AskExpiry
from nexus_spend.reservations import Reservations

from .harness import (
    ASK,
    SCOPE,
    alpha,
    call,
    events,
    fold_budget_record,
    put_budget,
    put_run,
    put_spent,
)


async def test_a_denied_ask_stops_the_scope_naming_it(
    db: asyncpg.Pool[Any], bus: Bus, res: Reservations, clock: ManualClock
) -> None:
    await put_budget(db, alpha(1.0, **ASK))
    await put_run(db, "r1")
    await put_run(db, "r2")
    assert (await res.reserve("r1", call())).decision is SpendDecision.GRANTED
    wait = await res.reserve("r2", call())
    assert wait.decision is SpendDecision.WAIT
    ask_id = wait.ask_run_id
    assert ask_id is not None
    decisions = AskDecisions(db, bus, clock)
    deny = ApprovalDecision(approval_id="extend", decision="deny", decided_by="nats:bob")
    decided = await decisions.decide(ask_id, deny)
    assert decided is not None
    assert decided.decision == "denied"
    closed = await events(bus, BUDGETS, subjects.budget_event(ask_id, BudgetEvent.ASK_CLOSED))
    assert len(closed) == 1
    assert isinstance(closed[0], BudgetAskClosed)
    assert (closed[0].decision, closed[0].decided_by) == ("denied", "nats:bob")
    # A later approval of the closed ask changes nothing.
    late = ApprovalDecision(approval_id="extend", decision="approve", decided_by="nats:eve")
    assert await decisions.decide(ask_id, late) is None
    assert not await events(bus, BUDGETS, subjects.budget_event(ask_id, BudgetEvent.EXTENDED))

    # Before the projection folds the denial, the stream's word already stops the run.
    early = await res.reserve("r2", call())
    assert early.decision is SpendDecision.STOP
    assert early.message.startswith(SCOPE)
    await fold_budget_record(bus, db)
    stop = await res.reserve("r2", call())
    assert stop.decision is SpendDecision.STOP
    assert stop.message == (
        f"{SCOPE} reached ($1.00 of $1.00); the ask to extend it was denied ({ask_id})"
    )
    assert stop.blocking is not None
    assert stop.blocking.state is StandingState.DENIED
    # Folded: the ask's row says it is closed.
    assert await decisions.decide(ask_id, late) is None
    # New runs of the scope are not admitted either.
    assert (await res.admit("r2")).decision is SpendDecision.STOP
    # An ask that never was: acked, nothing published.
    ghost = await decisions.decide("budget-ask-00000000000000000000", deny)
    assert ghost is None


async def test_an_unanswered_ask_expires_unless_a_person_claimed_it(
    db: asyncpg.Pool[Any], bus: Bus, res: Reservations, clock: ManualClock
) -> None:
    await put_budget(db, alpha(0.0, **ASK))
    other = BudgetDefinition.model_validate(
        {"id": "impl-daily", "scope": "agent:impl", "period": "day", "limits": {"cost_usd": 5}}
        | ASK
    )
    await put_run(db, "r1")
    first = await res.reserve("r1", call())
    assert first.decision is SpendDecision.WAIT
    alpha_ask = first.ask_run_id
    await put_budget(db, other)
    await put_budget(db, alpha(10.0))  # revision 2 of alpha, no longer blocking
    await put_spent(db, "agent", "impl", "day", "2026-11-28", 5.0)
    second = await res.reserve("r1", call())
    assert second.decision is SpendDecision.WAIT
    impl_ask = second.ask_run_id
    assert alpha_ask is not None
    assert impl_ask is not None
    assert impl_ask != alpha_ask
    await fold_budget_record(bus, db)
    # A person answered the agent's ask (their surface claimed it; the answer is on its way).
    person = await claim_approval(
        bus.js, impl_ask, "extend", "approve", decided_by="nats:al", surface="cli"
    )
    assert person.won
    expiry = AskExpiry(db, bus, clock)
    assert await expiry.step() == []
    clock.advance(61)
    assert await expiry.step() == [alpha_ask]
    decided = await events(bus, RUNS, subjects.run_event(alpha_ask, RunEvent.APPROVAL_DECIDED))
    assert [(e.decision, e.surface) for e in decided if isinstance(e, ApprovalDecided)] == [
        ("expired", "spend")
    ]
    closed = await events(bus, BUDGETS, subjects.budget_event(alpha_ask, BudgetEvent.ASK_CLOSED))
    assert [e.decision for e in closed if isinstance(e, BudgetAskClosed)] == ["expired"]
    claim = await held_claim(bus.js, alpha_ask, "extend")
    assert claim is not None
    assert claim.decision == "expired"
    # The claimed one is left to the person's answer.
    assert not await events(bus, RUNS, subjects.run_event(impl_ask, RunEvent.APPROVAL_DECIDED))
    assert not await events(bus, BUDGETS, subjects.budget_event(impl_ask, BudgetEvent.ASK_CLOSED))
    # Folded, the expiry is done: a second step closes nothing more.
    await fold_budget_record(bus, db)
    assert await expiry.step() == []


async def test_an_answer_after_the_ask_expired_closes_it_as_expired(
    db: asyncpg.Pool[Any], bus: Bus, res: Reservations, clock: ManualClock
) -> None:
    await put_budget(db, alpha(0.0, **ASK))
    await put_run(db, "r1")
    ask_id = (await res.reserve("r1", call())).ask_run_id
    assert ask_id is not None
    clock.advance(61)  # the expiry has not run: the surface claimed the answer first
    approve = ApprovalDecision(approval_id="extend", decision="approve", decided_by="nats:al")
    decided = await AskDecisions(db, bus, clock).decide(ask_id, approve)
    assert decided is not None
    assert decided.decision == "expired"
    closed = await events(bus, BUDGETS, subjects.budget_event(ask_id, BudgetEvent.ASK_CLOSED))
    assert [e.decision for e in closed if isinstance(e, BudgetAskClosed)] == ["expired"]
    assert not await events(bus, BUDGETS, subjects.budget_event(ask_id, BudgetEvent.EXTENDED))
