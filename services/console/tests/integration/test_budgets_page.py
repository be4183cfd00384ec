"""The budgets page: every budget the spend service lists, its limits and what reaching them
does, each scope's standing as a bar of spent and reserved against the limit, and an open ask
linked to the approval that decides it (its pseudo-run's page)."""

from __future__ import annotations

import re

from nexus_events.events.budgets import BudgetDefinition, BudgetPeriod, OnExceed
from nexus_events.events.spend import BudgetView, ScopeStanding, StandingState

from .conftest import READ_TOKEN, Clients
from .spend_double import SpendDouble, spend

__all__ = ["spend"]  # the spend double's fixture

ALPHA = BudgetDefinition.model_validate(
    {
        "id": "alpha-monthly",
        "description": "Team alpha's monthly model spend",
        "scope": "team:alpha",
        "period": "month",
        "limits": {"cost_usd": 50},
        "on_exceed": "ask",
        "ask": {"extend_cost_usd": 10},
    }
)
TASKS = BudgetDefinition.model_validate(
    {"id": "per-task", "scope": "task", "period": "total", "limits": {"tokens": 200000}}
)


def standing(budget: BudgetDefinition, instance: str, **values: object) -> ScopeStanding:
    base: dict[str, object] = {
        "budget_id": budget.id,
        "instance": instance,
        "period": budget.period,
        "bucket": "2026-11" if budget.period is BudgetPeriod.MONTH else "total",
        "on_exceed": budget.on_exceed,
        "state": StandingState.OK,
    }
    return ScopeStanding.model_validate({**base, **values})


def _row(page: str, instance: str) -> str:
    return page.split(f'data-instance="{instance}"', 1)[1].split("</tr>", 1)[0]


async def test_budgets_their_standings_and_an_open_ask(
    spend: SpendDouble, clients: Clients
) -> None:
    asking = standing(
        ALPHA, "team:alpha", state=StandingState.ASKING, spent_cost_usd=40.0,
        reserved_cost_usd=10.0, limit_cost_usd=50.0, ask_id="budget-ask-0123456789abcdef0123",
    )  # fmt: skip
    tokens = standing(
        TASKS, "task:T-1", state=StandingState.WARNING, spent_tokens=170_000,
        reserved_tokens=60_000, limit_tokens=200_000,
    )  # fmt: skip
    spend.budgets = [
        BudgetView(revision=2, budget=TASKS, standings=[tokens]),
        BudgetView(revision=1, budget=ALPHA, standings=[asking]),
    ]
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/budgets")
    assert status == 200, page
    assert page.index('id="budget-alpha-monthly"') < page.index('id="budget-per-task"')
    assert "Team alpha&#39;s monthly model spend" in page
    assert "approvers: team:alpha" in page
    assert str(OnExceed.ASK) in page

    alpha = _row(page, "team:alpha")
    assert "$40.00 spent, $10.00 reserved of $50.00" in alpha
    assert 'class="spent" x="0" y="0" width="192.0"' in alpha  # 80 % of 240
    assert 'class="reserved" x="192.0" y="0" width="48.0"' in alpha  # 20 %
    assert '<a class="ask" href="/runs/budget-ask-0123456789abcdef0123">' in alpha

    task = _row(page, "task:T-1")
    assert "170,000 tokens spent, 60,000 reserved of 200,000" in task
    # Spent 85 % and reserved 30 %: the bar stops at the limit.
    widths = re.findall(r'class="(spent|reserved)" x="[^"]*" y="0" width="([^"]*)"', task)
    assert widths == [("spent", "204.0"), ("reserved", "36.0")]
    assert 'class="ask"' not in task


async def test_no_budgets_says_how_to_add_one(spend: SpendDouble, clients: Clients) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/budgets")
    assert status == 200
    assert "nexus budgets apply FILE" in page
