"""How spend shows on a run: `nexus ps`'s row of a run a budget holds, the live view's lines
for budget_paused / budget_resumed, and `nexus attach`'s line per covering scope."""

from __future__ import annotations

from typing import Any

from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.events.budgets import BudgetPeriod, OnExceed
from nexus_events.events.runs import RunBudgetPaused, RunBudgetResumed, RunQueued
from nexus_events.events.spend import RunSpend, ScopeStanding, StandingState, UsageLine
from rich.console import Console

from nexus_cli.commands.runs import budget_waits, ps_row
from nexus_cli.output import table
from nexus_cli.runview import RunView, describe
from nexus_cli.spendview import (
    left_text,
    reserved_text,
    run_scope_line,
    spend_lines,
    spent_text,
    standing_text,
    usd,
)

WAIT = "alpha-monthly: team:alpha month 2026-11 reached ($50.00 of $50.00), asking team:alpha"


def _row(**fields: Any) -> dict[str, Any]:
    return {
        "run_id": "run_1",
        "agent_id": "implementer",
        "task_id": "T-1",
        "status": RunStatus.QUEUED.value,
        "reason": None,
        "attempt": 1,
        "max_attempts": 1,
        "turns": 0,
        "condensations": 0,
        "cost_usd": 0.0123,
        "last_event_at": None,
        **fields,
    }


def test_ps_shows_a_budget_wait_in_the_status_and_why_under_the_table() -> None:
    held_row = _row(budget_wait=WAIT, run_id="run_held")
    held = ps_row(held_row, 0)
    assert held[3:5] == ("queued (budget)", None)
    assert held[8] == "$0.0123"
    free_row = _row(status=RunStatus.RUNNING.value, cost_usd=31.2)
    free = ps_row(free_row, 0)
    assert free[3:5] == ("running", None)
    assert free[8] == "$31.20"
    assert budget_waits([held_row, free_row]) == [f"run_held waits: {WAIT}"]
    # Readable at 100 columns: one line per run, the status cell whole.
    columns = ("RUN", "AGENT", "TASK", "STATUS", "REASON", "ATTEMPT", "TURNS", "CONDENSED")
    console = Console(width=100, record=True)
    console.print(table(None, (*columns, "COST", "LAST EVENT"), [held, free]))
    lines = console.export_text().splitlines()
    assert len(lines) == 3, lines
    assert "queued (budget)" in lines[1]


def test_budget_pause_and_resume_are_readable_lines_and_toggle_the_status() -> None:
    paused = RunBudgetPaused(
        budget_id="alpha-monthly",
        instance="team:alpha",
        bucket="2026-11",
        turn=4,
        message="team:alpha month 2026-11 reached ($50.00 of $50.00): asking team:alpha",
        ask_run_id="budget-ask-0123",
    ).model_dump(mode="json")
    resumed = RunBudgetResumed(budget_id="alpha-monthly", turn=4, waited_seconds=75)
    assert describe(RunEvent.BUDGET_PAUSED, paused) == (
        "budget_paused at turn 4: team:alpha month 2026-11 reached ($50.00 of $50.00): asking"
        " team:alpha (ask budget-ask-0123)"
    )
    assert describe(RunEvent.BUDGET_RESUMED, resumed.model_dump(mode="json")) == (
        "budget_resumed at turn 4: budget alpha-monthly extended after 1m15s"
    )
    queued = RunQueued(position=2, limit="budget", waiting_for=WAIT).model_dump(mode="json")
    assert describe(RunEvent.QUEUED, queued) == f"queued at position 2 (budget limit): {WAIT}"
    view = RunView("run_1")
    view.apply(RunEvent.STARTED, {}, None)
    view.apply(RunEvent.BUDGET_PAUSED, {**paused, "ask_approval_id": "ap-1"}, None)
    assert view.status == RunStatus.AWAITING_APPROVAL
    console = Console(width=200, record=True)
    console.print(view.render())
    assert "nexus approve budget-ask-0123 ap-1" in console.export_text()
    view.apply(RunEvent.BUDGET_RESUMED, resumed.model_dump(mode="json"), None)
    assert view.status == RunStatus.RUNNING
    assert view.budget_pause is None


def _standing(**fields: Any) -> ScopeStanding:
    base: dict[str, Any] = {
        "budget_id": "alpha-monthly",
        "instance": "team:alpha",
        "period": BudgetPeriod.MONTH,
        "bucket": "2026-11",
        "on_exceed": OnExceed.ASK,
        "state": StandingState.OK,
    }
    return ScopeStanding.model_validate({**base, **fields})


def test_each_covering_scope_is_one_line_of_spent_against_its_limit() -> None:
    cost = _standing(spent_cost_usd=30.8, reserved_cost_usd=0.4, limit_cost_usd=50)
    assert run_scope_line(cost) == (
        "team:alpha month 2026-11: $31.20 of $50.00 (62 %) (alpha-monthly)"
    )
    tokens = _standing(
        instance="task:T-1", period=BudgetPeriod.TOTAL, bucket="total", spent_tokens=9000,
        limit_tokens=10000, state=StandingState.WARNING, budget_id="per-task",
    )  # fmt: skip
    assert run_scope_line(tokens) == (
        "task:T-1 total total: 9,000 of 10,000 tokens (90 %) [warning] (per-task)"
    )
    usage = UsageLine(
        key="run_1", runs=1, turns=3, tokens_in=1, tokens_out=1, cost_usd=0.2, wall_seconds=1
    )
    spend = RunSpend(
        run_id="run_1", team="alpha", usage=usage, scopes=[cost], waiting_for="an ask is open"
    )
    assert spend_lines(spend) == [
        "  team     alpha",
        "  waiting  an ask is open",
        "  budgets:",
        "    team:alpha month 2026-11: $31.20 of $50.00 (62 %) (alpha-monthly)",
    ]
    assert (usd(0.0), usd(1234.5)) == ("$0.0000", "$1,234.50")


def test_a_token_budget_is_shown_in_tokens() -> None:
    tokens = _standing(spent_tokens=9000, reserved_tokens=500, limit_tokens=10000)
    assert (spent_text(tokens), reserved_text(tokens), left_text(tokens)) == (
        "9,000 tokens",
        "500 tokens",
        "500 tokens",
    )
    assert standing_text(tokens) == "9,000 / 500 / 10,000 tokens"
    cost = _standing(spent_cost_usd=3, reserved_cost_usd=0.5, limit_cost_usd=5)
    assert (spent_text(cost), reserved_text(cost), left_text(cost)) == ("$3.00", "$0.5000", "$1.50")
