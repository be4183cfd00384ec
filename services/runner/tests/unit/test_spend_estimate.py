"""The reservation's pure parts: the call's estimate, the step after a verdict, and what a
stop or a wait publishes."""

from __future__ import annotations

import pytest
from nexus_events.contract.runstate import RunStatus
from nexus_events.events.budgets import BudgetPeriod, OnExceed
from nexus_events.events.runs import Reason
from nexus_events.events.spend import ScopeStanding, SpendDecision, SpendVerdict, StandingState

from nexus_runner.config import DEFAULT_PRICES, Price
from nexus_runner.context import upper_bound
from nexus_runner.spend import Step, estimate, next_step, paused_event, stopped
from nexus_runner.tokens import counter_for

MESSAGES = [
    {"role": "system", "content": "You are an implementer."},
    {"role": "user", "content": "Make the tests pass, then call finish."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
SCOPE = ScopeStanding(
    budget_id="alpha-monthly",
    instance="team:alpha",
    period=BudgetPeriod.MONTH,
    bucket="2026-11",
    on_exceed=OnExceed.STOP,
    state=StandingState.EXHAUSTED,
)


def test_the_estimate_is_the_prompts_bound_plus_the_whole_reply_at_the_models_price() -> None:
    counter = counter_for("gpt-4o-mini")
    prompt = upper_bound(MESSAGES, TOOLS)
    tokens, cost = estimate(DEFAULT_PRICES, "gpt-4o-mini", MESSAGES, TOOLS, max_output_tokens=4_096)
    assert prompt > upper_bound(MESSAGES, [])  # the tool specs count
    # Never below what the real tokenizer counts: the estimate bounds the call's cost.
    assert prompt >= counter.count(MESSAGES, TOOLS)
    assert tokens == prompt + 4_096
    price = DEFAULT_PRICES["gpt-4o-mini"]
    expected = (prompt * price.input_per_mtok + 4_096 * price.output_per_mtok) / 1e6
    assert cost == pytest.approx(expected)
    assert cost > 0


def test_an_unpriced_model_is_estimated_in_tokens_at_no_cost() -> None:
    tokens, cost = estimate({}, "offline-model", MESSAGES, [], max_output_tokens=100)
    assert tokens == upper_bound(MESSAGES, []) + 100
    assert cost == 0.0
    priced = {"offline-model": Price(input_per_mtok=1.0, output_per_mtok=3.0)}
    _, cost = estimate(priced, "offline-model", MESSAGES, [], max_output_tokens=100)
    assert cost == pytest.approx(((tokens - 100) * 1.0 + 100 * 3.0) / 1e6)


def test_a_longer_conversation_is_estimated_higher() -> None:
    longer = [*MESSAGES, {"role": "assistant", "content": "Reading the tests first. " * 50}]
    short, _ = estimate(DEFAULT_PRICES, "gpt-4o", MESSAGES, [], max_output_tokens=1)
    long, _ = estimate(DEFAULT_PRICES, "gpt-4o", longer, [], max_output_tokens=1)
    assert long > short + 100


@pytest.mark.parametrize(
    ("decision", "paused", "step"),
    [
        (SpendDecision.GRANTED, False, Step.GO),
        (SpendDecision.GRANTED, True, Step.GO),
        (SpendDecision.STOP, False, Step.STOP),
        (SpendDecision.STOP, True, Step.STOP),
        (SpendDecision.WAIT, False, Step.PAUSE),
        (SpendDecision.WAIT, True, Step.WAIT),
    ],
)
def test_the_step_after_a_verdict(decision: SpendDecision, paused: bool, step: Step) -> None:
    assert next_step(SpendVerdict(decision=decision), paused=paused) is step


def test_silence_is_asked_again_paused_or_not() -> None:
    assert next_step(None, paused=False) is Step.UNANSWERED
    assert next_step(None, paused=True) is Step.UNANSWERED


def test_a_stop_fails_the_run_budget_exceeded_naming_the_scope() -> None:
    verdict = SpendVerdict(decision=SpendDecision.STOP, blocking=SCOPE, message="")
    ending = stopped(verdict)
    assert ending.status is RunStatus.FAILED
    assert ending.reason == Reason.BUDGET_EXCEEDED
    assert ending.message == "budget alpha-monthly: team:alpha month 2026-11 reached"
    assert ending.detail == {
        "budget_id": "alpha-monthly",
        "instance": "team:alpha",
        "bucket": "2026-11",
    }
    said = stopped(verdict.model_copy(update={"message": "the service's words"}))
    assert said.message == "the service's words"


def test_a_wait_is_published_with_its_scope_and_ask() -> None:
    verdict = SpendVerdict(
        decision=SpendDecision.WAIT,
        blocking=SCOPE,
        message="asking",
        ask_run_id="budget-ask-1",
        ask_approval_id="budget-ask-1",
    )
    event = paused_event(verdict, 4)
    assert (event.budget_id, event.instance, event.bucket) == SCOPE_KEY
    assert (event.turn, event.message, event.ask_approval_id) == (4, "asking", "budget-ask-1")
    bare = paused_event(SpendVerdict(decision=SpendDecision.WAIT), 1)
    assert bare.budget_id == "unknown"
    assert bare.message  # never an empty line for people


SCOPE_KEY = ("alpha-monthly", "team:alpha", "2026-11")
