"""Budgets, cost, stuck detection and the retry policy: pure bookkeeping."""

from __future__ import annotations

from nexus_events.events.specs import Budgets

from nexus_runner.budget import StuckDetector, Usage, exceeded, turn_cost
from nexus_runner.config import DEFAULT_PRICES, Price
from nexus_runner.llm import RetryPolicy


def test_cost_from_the_price_table() -> None:
    prices = {"m": Price(input_per_mtok=1.0, output_per_mtok=2.0)}
    assert turn_cost(prices, "m", 1_000_000, 500_000) == 2.0
    assert turn_cost(prices, "unknown", 10, 10) == 0.0
    assert "gpt-4o-mini" in DEFAULT_PRICES


def test_each_budget_is_named_when_exceeded() -> None:
    budgets = Budgets(max_turns=2, max_tokens=100, max_cost_usd=1.0)
    assert exceeded(budgets, Usage(turns=1), next_turn=True) is None
    assert exceeded(budgets, Usage(turns=2), next_turn=True) == "max_turns"
    assert exceeded(budgets, Usage(turns=2), next_turn=False) is None
    assert exceeded(budgets, Usage(tokens_in=90, tokens_out=11), next_turn=False) == "max_tokens"
    assert exceeded(budgets, Usage(cost_usd=1.5), next_turn=False) == "max_cost_usd"


def test_stuck_on_repeats_in_a_row_only() -> None:
    stuck = StuckDetector(repeat=3, idle=10)
    assert stuck.record_call("a", "{}", "x") is None
    assert stuck.record_call("a", "{}", "x") is None
    assert stuck.record_call("b", "{}", "x") is None  # streak broken
    assert stuck.record_call("b", "{}", "x") is None
    assert stuck.record_call("b", "{}", "x") is not None


def test_stuck_after_turns_without_anything_new() -> None:
    stuck = StuckDetector(repeat=99, idle=2)
    assert stuck.record_turn([("a", "{}", "1")]) is None
    assert stuck.record_turn([("a", "{}", "1")]) is None  # idle 1
    assert stuck.record_turn([("a", "{}", "2")]) is None  # new result: progress
    assert stuck.record_turn([]) is None
    assert stuck.record_turn([]) is not None


def test_retry_policy_honours_retry_after_and_caps() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=0.5, max_delay=4)
    assert policy.delay(1, None) == 0.5
    assert policy.delay(3, None) == 2.0
    assert policy.delay(10, None) == 4
    assert policy.delay(1, 3.0) == 3.0
    assert policy.delay(1, 100.0) == 4
