"""The pure part of the usage fold: call keys, a repeated call counted once with its larger
usage, the batch's ledger deltas per key in key order, and the threshold share."""

from __future__ import annotations

from datetime import UTC, datetime

from nexus_events.events import RunCondensed, RunTurn
from nexus_events.events.budgets import BudgetDefinition
from nexus_events.events.runs import Condensation

from nexus_spend.coverage import RunScopes, call_keys
from nexus_spend.thresholds import Spent, crossing
from nexus_spend.usage_fold import CallUsage, LedgerDeltas, model_call, settle

AT = datetime(2026, 11, 28, 13, 0, tzinfo=UTC)


def condensed(turn: int, strategy: str, cost: float) -> RunCondensed:
    return RunCondensed(
        turn=turn,
        tokens_before=900,
        tokens_after=300,
        budget=1000,
        counter="estimate",
        condensation=Condensation.model_validate({"strategy": strategy, "summary": "s"}),
        llm_tokens_in=40,
        llm_tokens_out=10,
        cost_usd=cost,
    )


def test_turns_and_condensations_are_keyed_apart() -> None:
    turn = RunTurn(turn=3, tokens_in=100, tokens_out=20, cost_usd=0.5)
    assert model_call(turn) == ("turn:3", CallUsage(100, 20, 0.5))
    assert model_call(condensed(3, "summarise", 0.1)) == (
        "condensed:3:summarise",
        CallUsage(40, 10, 0.1),
    )
    assert model_call(condensed(3, "elide", 0.0))[0] == "condensed:3:elide"  # type: ignore[index]


def test_a_call_seen_first_adds_itself_and_one_call() -> None:
    s = settle(None, CallUsage(100, 20, 0.5))
    assert (s.stored, s.delta, s.new_call) == (
        CallUsage(100, 20, 0.5),
        CallUsage(100, 20, 0.5),
        True,
    )


def test_a_resumed_turn_counts_once_with_its_larger_usage() -> None:
    first = settle(None, CallUsage(100, 20, 0.5))
    again = settle(first.stored, CallUsage(120, 10, 0.7))
    assert again.new_call is False
    assert again.stored == CallUsage(120, 20, 0.7)
    assert again.delta.tokens_in == 20
    assert again.delta.tokens_out == 0
    assert abs(again.delta.cost_usd - 0.2) < 1e-9
    same = settle(again.stored, CallUsage(50, 5, 0.1))
    assert same.delta.is_zero()
    assert first.delta.cost_usd + again.delta.cost_usd == same.stored.cost_usd


def test_ledger_deltas_sum_per_key_and_come_in_key_order() -> None:
    a = RunScopes("r1", agent_id="impl", team="alpha")
    b = RunScopes("r2", agent_id="impl", team="beta")
    deltas = LedgerDeltas()
    deltas.add(call_keys(a, AT), settle(None, CallUsage(10, 0, 1.0)))
    deltas.add(call_keys(b, AT), settle(None, CallUsage(10, 0, 2.0)))
    deltas.add(call_keys(a, AT), settle(CallUsage(10, 0, 1.0), CallUsage(10, 0, 1.5)))
    deltas.add(call_keys(a, AT), settle(CallUsage(10, 0, 1.5), CallUsage(10, 0, 1.0)))  # no-op
    ordered = deltas.in_order()
    assert [k for k, _ in ordered] == sorted(deltas.by_key)
    by = {(k.scope, k.name, k.period): d for k, d in ordered}
    glob = by[("global", "", "month")]
    assert (glob.cost_usd, glob.tokens, glob.calls) == (3.5, 20, 2)
    alpha = by[("team", "alpha", "day")]
    assert (alpha.cost_usd, alpha.calls) == (1.5, 1)
    assert ("team", "beta", "total") in by


def test_a_threshold_is_the_larger_share_of_cost_or_tokens_from_warn_at() -> None:
    budget = BudgetDefinition.model_validate(
        {
            "id": "b",
            "scope": "team:alpha",
            "period": "month",
            "limits": {"cost_usd": 10, "tokens": 1000},
            "warn_at": 0.8,
        }
    )
    assert crossing(budget, Spent(7.9, 100)) is None
    assert crossing(budget, Spent(8.0, 100)) == 0.8
    assert crossing(budget, Spent(1.0, 900)) == 0.9
    runs_only = budget.model_copy(
        update={
            "limits": budget.limits.model_copy(update={"cost_usd": None, "tokens": None, "runs": 3})
        }
    )
    assert crossing(runs_only, Spent(100.0, 10**6)) is None
