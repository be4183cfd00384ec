"""The reservation's and the admission's decision (nexus_spend.decide), on facts alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nexus_events.events.budgets import BudgetDefinition, ask_id
from nexus_events.events.spend import SpendDecision, StandingState

from nexus_spend.coverage import RunScopes, covering
from nexus_spend.decide import (
    ASK_APPROVAL_ID,
    AskSeen,
    AskState,
    BudgetFacts,
    Extension,
    Usage,
    decide_admit,
    decide_reserve,
    standing,
)

AT = datetime(2026, 11, 28, 13, 0, tzinfo=UTC)
RUN = RunScopes("r1", agent_id="impl", team="alpha", task_id="T-1")


def budget(id: str, scope: str = "team:alpha", **kw: Any) -> BudgetDefinition:
    body: dict[str, Any] = {"id": id, "scope": scope, "period": "month"}
    body.setdefault("limits", {"cost_usd": 50})
    return BudgetDefinition.model_validate({**body, **kw})


def facts(b: BudgetDefinition, revision: int = 1, **kw: Any) -> BudgetFacts:
    (coverage,) = covering([(b, revision)], RUN, AT)
    return BudgetFacts(coverage=coverage, **kw)


ASKING = {"on_exceed": "ask", "ask": {"extend_cost_usd": 10}}


def test_a_call_landing_exactly_on_the_limit_is_granted_and_a_cent_more_is_not() -> None:
    f = facts(budget("alpha"), spent=Usage(40.0, 0), held=Usage(9.0, 0))
    granted = decide_reserve([f], Usage(1.0, 10))
    assert granted.verdict.decision is SpendDecision.GRANTED
    (s,) = granted.verdict.scopes
    assert (s.reserved_cost_usd, s.reserved_tokens) == (10.0, 10)  # the call's own hold counted
    stopped = decide_reserve([f], Usage(1.01, 10))
    assert stopped.verdict.decision is SpendDecision.STOP
    # Not reached yet by what is spent and held: the message says where the call would take it.
    assert stopped.verdict.message == (
        "budget alpha: team:alpha month 2026-11 reached ($50.01 of $50.00)"
    )
    assert stopped.verdict.blocking is not None
    assert stopped.verdict.blocking.budget_id == "alpha"
    assert stopped.ask is None


def test_the_message_names_what_is_spent_and_held() -> None:
    f = facts(budget("alpha-monthly"), spent=Usage(50.02, 0))
    verdict = decide_reserve([f], Usage(0.01, 1)).verdict
    assert verdict.message == (
        "budget alpha-monthly: team:alpha month 2026-11 reached ($50.02 of $50.00)"
    )


def test_the_first_blocking_budget_in_sorted_order_answers() -> None:
    # covering() sorts by key (global < team) then id; both block, the global one answers.
    g = budget("zz-global", "global", limits={"cost_usd": 1})
    t = budget("aa-team", limits={"cost_usd": 1}, **ASKING)
    both = sorted(covering([(t, 1), (g, 1)], RUN, AT), key=lambda c: (c.key, c.budget.id))
    fs = [BudgetFacts(coverage=c, spent=Usage(1.0, 0)) for c in both]
    d = decide_reserve(fs, Usage(0.5, 0))
    assert d.verdict.blocking is not None
    assert d.verdict.blocking.budget_id == "zz-global"
    assert d.verdict.decision is SpendDecision.STOP
    # Only the team budget blocks: it answers (WAIT, an ask).
    fs[0] = BudgetFacts(coverage=fs[0].coverage)
    d = decide_reserve(fs, Usage(0.5, 0))
    assert d.verdict.decision is SpendDecision.WAIT
    assert d.verdict.blocking is not None
    assert d.verdict.blocking.budget_id == "aa-team"


def test_tokens_are_checked_apart_from_cost_and_a_missing_limit_is_not_checked() -> None:
    tokens_only = budget("tok", limits={"tokens": 1000})
    f = facts(tokens_only, spent=Usage(1e6, 900))
    assert decide_reserve([f], Usage(99.0, 100)).verdict.decision is SpendDecision.GRANTED
    d = decide_reserve([f], Usage(0.0, 101))
    assert d.verdict.decision is SpendDecision.STOP
    assert d.verdict.message.endswith("reached (1,001 of 1,000 tokens)")
    both = facts(budget("both", limits={"cost_usd": 5, "tokens": 1000}), spent=Usage(1.0, 999))
    assert decide_reserve([both], Usage(0.1, 2)).verdict.decision is SpendDecision.STOP
    assert decide_reserve([both], Usage(4.0, 1)).verdict.decision is SpendDecision.GRANTED


def test_an_extension_raises_the_limit() -> None:
    b = budget("alpha", **ASKING)
    f = facts(b, spent=Usage(50.0, 0))
    assert decide_reserve([f], Usage(1.0, 0)).verdict.decision is SpendDecision.WAIT
    approved = (AskSeen(ask_id("alpha", "team:alpha", "2026-11", 1), 1, 1, AskState.APPROVED),)
    extended = facts(b, spent=Usage(50.0, 0), extension=Extension(10.0), asks=approved)
    d = decide_reserve([extended], Usage(1.0, 0))
    assert d.verdict.decision is SpendDecision.GRANTED
    assert d.verdict.scopes[0].limit_cost_usd == 60.0


def test_stop_ends_and_ask_waits_on_a_new_ask_for_the_next_round() -> None:
    stop = facts(budget("alpha"), spent=Usage(50.0, 0))
    assert decide_reserve([stop], Usage(0.01, 0)).verdict.decision is SpendDecision.STOP
    approved = (AskSeen(ask_id("alpha", "team:alpha", "2026-11", 1), 1, 1, AskState.APPROVED),)
    ask = facts(
        budget("alpha", **ASKING), spent=Usage(60.0, 0), extension=Extension(10.0), asks=approved
    )
    d = decide_reserve([ask], Usage(0.01, 0))
    assert d.verdict.decision is SpendDecision.WAIT
    assert d.ask is not None
    assert d.ask.round == 2
    assert d.ask.ask_id == ask_id("alpha", "team:alpha", "2026-11", 2)
    assert (d.verdict.ask_run_id, d.verdict.ask_approval_id) == (d.ask.ask_id, ASK_APPROVAL_ID)
    assert d.verdict.scopes[0].state is StandingState.ASKING
    assert "asking its approvers to extend team:alpha's budget alpha by $10.00 for 2026-11" in (
        d.verdict.message
    )


def test_an_open_ask_is_waited_on_not_opened_again() -> None:
    open_ = (AskSeen("budget-ask-open", 1, 1, AskState.OPEN),)
    f = facts(budget("alpha", **ASKING), spent=Usage(50.0, 0), asks=open_)
    d = decide_reserve([f], Usage(0.01, 0))
    assert d.verdict.decision is SpendDecision.WAIT
    assert d.ask is None
    assert d.verdict.ask_run_id == "budget-ask-open"


def test_a_closed_ask_of_the_revision_stops_and_a_new_revision_asks_again() -> None:
    denied = (AskSeen("budget-ask-1", 1, 1, AskState.DENIED),)
    b = budget("alpha", **ASKING)
    f = facts(b, spent=Usage(50.0, 0), asks=denied)
    d = decide_reserve([f], Usage(0.01, 0))
    assert d.verdict.decision is SpendDecision.STOP
    assert d.verdict.message == (
        "budget alpha: team:alpha month 2026-11 reached ($50.00 of $50.00);"
        " the ask to extend it was denied (budget-ask-1)"
    )
    assert d.verdict.scopes[0].state is StandingState.DENIED
    # The scope stays closed even for a call that would fit.
    below = facts(b, spent=Usage(1.0, 0), asks=denied)
    closed = decide_reserve([below], Usage(0.01, 0)).verdict
    assert closed.decision is SpendDecision.STOP
    assert closed.message == (
        "budget alpha: team:alpha month 2026-11 closed; the ask to extend it was denied"
        " (budget-ask-1)"
    )
    expired = (AskSeen("budget-ask-1", 1, 1, AskState.EXPIRED),)
    assert decide_admit([facts(b, asks=expired)]).verdict.decision is SpendDecision.STOP
    # Applied again (revision 2): the old denial no longer closes it; the next ask is round 2.
    again = facts(b, revision=2, spent=Usage(50.0, 0), asks=denied)
    d = decide_reserve([again], Usage(0.01, 0))
    assert d.verdict.decision is SpendDecision.WAIT
    assert d.ask is not None
    assert d.ask.round == 2


def test_admission_counts_runs_and_refuses_a_reached_scope() -> None:
    runs = budget("alpha-runs", limits={"runs": 3})
    assert decide_admit([facts(runs, runs=2)]).verdict.decision is SpendDecision.GRANTED
    full = decide_admit([facts(runs, runs=3)])
    assert full.verdict.decision is SpendDecision.STOP
    assert full.verdict.message.endswith("reached (3 of 3 runs)")
    extended = facts(runs, runs=3, extension=Extension(runs=1))
    assert decide_admit([extended]).verdict.decision is SpendDecision.GRANTED
    cost = budget("alpha", **ASKING)
    reached = decide_admit([facts(cost, spent=Usage(49.0, 0), held=Usage(1.0, 0))])
    assert reached.verdict.decision is SpendDecision.WAIT
    assert reached.ask is not None
    assert decide_admit([facts(cost, spent=Usage(49.99, 0))]).verdict.decision is (
        SpendDecision.GRANTED
    )
    frozen = budget("frozen", limits={"cost_usd": 0})
    assert decide_admit([facts(frozen)]).verdict.decision is SpendDecision.STOP


def test_an_ask_that_would_not_raise_the_limit_reached_stops_instead() -> None:
    runs = budget("alpha-runs", limits={"runs": 1, "cost_usd": 50}, **ASKING)
    d = decide_admit([facts(runs, runs=1)])
    assert d.verdict.decision is SpendDecision.STOP
    assert d.ask is None
    assert d.verdict.message.endswith("reached (1 of 1 runs); its ask does not extend runs")
    # A call over the token limit, which the ask does not extend, stops too, even with the
    # cost limit (which it does extend) reached as well.
    both = budget("b", limits={"cost_usd": 1, "tokens": 100}, **ASKING)
    over = decide_reserve([facts(both, spent=Usage(1.0, 50))], Usage(0.0, 51)).verdict
    assert over.decision is SpendDecision.STOP
    assert over.message.endswith("its ask does not extend tokens")
    # The cost limit it does extend: an ask.
    assert decide_reserve([facts(runs, spent=Usage(50.0, 0))], Usage(1.0, 0)).ask is not None


def test_no_budget_grants() -> None:
    assert decide_reserve([], Usage(1e6, 10**8)).verdict.decision is SpendDecision.GRANTED
    assert decide_admit([]).verdict.decision is SpendDecision.GRANTED


def test_standing_states() -> None:
    b = budget("alpha", limits={"cost_usd": 50, "tokens": 1000}, warn_at=0.8)
    assert standing(facts(b, spent=Usage(39.0, 0))).state is StandingState.OK
    assert standing(facts(b, spent=Usage(39.0, 0), held=Usage(1.0, 0))).state is (
        StandingState.WARNING
    )
    assert standing(facts(b, spent=Usage(0.0, 800))).state is StandingState.WARNING
    s = standing(facts(b, spent=Usage(50.0, 10)))
    assert s.state is StandingState.EXHAUSTED
    assert (s.spent_cost_usd, s.limit_cost_usd, s.limit_tokens) == (50.0, 50.0, 1000)
    assert s.left_cost_usd() == 0.0
    asking = facts(b, spent=Usage(50.0, 0), asks=(AskSeen("budget-ask-x", 1, 1, AskState.OPEN),))
    assert standing(asking).state is StandingState.ASKING
    assert standing(asking).ask_id == "budget-ask-x"
    closed = facts(b, asks=(AskSeen("budget-ask-y", 1, 1, AskState.EXPIRED),))
    assert standing(closed).state is StandingState.DENIED
    assert standing(closed).ask_id == "budget-ask-y"
    runs = budget("r", limits={"runs": 2})
    assert standing(facts(runs, runs=2)).state is StandingState.EXHAUSTED
    assert standing(facts(runs, runs=1)).state is StandingState.OK
