"""The canary policy's pure decision: each rule of promote_when and rollback_when."""

from __future__ import annotations

from nexus_events.events.lab import ArmStats
from nexus_events.events.lab_specs import CanaryRule, CanarySpec

from nexus_core.canary import arm_stats, canary_refusal, decide


def _arm(runs: int, succeeded: int, cost: float = 0.0, revision: int = 1) -> ArmStats:
    return arm_stats(revision, runs, succeeded, cost * runs, 3 * runs)


def _spec(promote: CanaryRule, rollback: CanaryRule) -> CanarySpec:
    return CanarySpec(revision=2, share=0.5, promote_when=promote, rollback_when=rollback)


NEVER_ROLLBACK = CanaryRule(min_runs=1000, max_success_drop=0.0)
NEVER_PROMOTE = CanaryRule(min_runs=1000, max_success_drop=1.0)


def test_arm_stats_means():
    stats = arm_stats(4, 4, 3, 2.0, 10)
    assert (stats.success_rate, stats.mean_cost_usd, stats.mean_turns) == (0.75, 0.5, 2.5)
    assert arm_stats(4, 0, 0, 0.0, 0).success_rate == 0.0


def test_nothing_before_min_runs_on_both_arms():
    spec = _spec(CanaryRule(min_runs=5, max_success_drop=0.0), NEVER_ROLLBACK)
    assert decide(_arm(5, 5), _arm(4, 4), spec) is None
    assert decide(_arm(4, 4), _arm(5, 5), spec) is None
    decided = decide(_arm(5, 5), _arm(5, 5), spec)
    assert decided is not None
    assert decided.decision == "promote"


def test_promote_needs_every_condition():
    rule = CanaryRule(min_runs=2, min_success_rate=0.8, max_cost_ratio=1.5)
    spec = _spec(rule, NEVER_ROLLBACK)
    assert decide(_arm(10, 7, cost=1.0), _arm(10, 10, cost=1.0), spec) is None  # rate 0.7
    assert decide(_arm(10, 9, cost=2.0), _arm(10, 10, cost=1.0), spec) is None  # ratio 2
    decided = decide(_arm(10, 9, cost=1.4), _arm(10, 10, cost=1.0), spec)
    assert decided is not None
    assert decided.decision == "promote"
    assert "min_success_rate 0.8" in decided.rule
    assert "max_cost_ratio 1.5" in decided.rule
    assert "\n" not in decided.rule


def test_promote_on_success_drop():
    spec = _spec(CanaryRule(min_runs=3, max_success_drop=0.1), NEVER_ROLLBACK)
    assert decide(_arm(10, 8), _arm(10, 10), spec) is None  # drop 0.2
    decided = decide(_arm(10, 9), _arm(10, 10), spec)  # drop 0.1: within
    assert decided is not None
    assert decided.decision == "promote"


def test_rollback_on_any_breached_limit():
    rollback = CanaryRule(min_runs=5, min_success_rate=0.5, max_success_drop=0.3, max_cost_ratio=3)
    spec = _spec(NEVER_PROMOTE, rollback)
    assert decide(_arm(5, 5, cost=1.0), _arm(5, 5, cost=1.0), spec) is None
    low = decide(_arm(5, 2), _arm(5, 2), spec)  # rate 0.4 < 0.5, no drop
    assert low is not None
    assert low.decision == "rollback"
    assert "min_success_rate" in low.rule
    drop = decide(_arm(10, 6), _arm(10, 10), spec)  # drop 0.4
    assert drop is not None
    assert "max_success_drop 0.3" in drop.rule
    cost = decide(_arm(5, 5, cost=4.0), _arm(5, 5, cost=1.0), spec)
    assert cost is not None
    assert cost.decision == "rollback"
    assert "max_cost_ratio 3" in cost.rule
    free = decide(_arm(5, 5, cost=1.0), _arm(5, 5, cost=0.0), spec)  # anything over free
    assert free is not None
    assert free.decision == "rollback"


def test_rollback_is_judged_before_promote():
    spec = _spec(
        CanaryRule(min_runs=2, max_cost_ratio=10), CanaryRule(min_runs=2, max_success_drop=0.2)
    )
    decided = decide(_arm(4, 1), _arm(4, 4), spec)
    assert decided is not None
    assert decided.decision == "rollback"


def test_default_policy():
    spec = CanarySpec(revision=2, share=0.1)  # promote: no drop at 10 runs; rollback: 0.2 at 5
    assert decide(_arm(5, 3), _arm(5, 5), spec) is not None  # drop 0.4 at 5 runs: rollback
    assert decide(_arm(9, 9), _arm(9, 9), spec) is None
    decided = decide(_arm(10, 10), _arm(10, 10), spec)
    assert decided is not None
    assert decided.decision == "promote"


def test_canary_refusal_at_apply():
    assert canary_refusal("impl", 9, revision=2, latest=3, candidate_live=True) is None
    assert canary_refusal("impl", 9, revision=3, latest=3, candidate_live=True) is None
    itself = canary_refusal("impl", 9, revision=4, latest=3, candidate_live=False)
    assert itself == (
        "agent 'impl' (seq 9) not applied: its canary names revision 4, the one it would be"
        " applied as"
    )
    missing = canary_refusal("impl", 9, revision=7, latest=3, candidate_live=False)
    assert missing is not None
    assert missing.endswith("names revision 7, which does not exist (latest 3)")
    deleted = canary_refusal("impl", 9, revision=2, latest=3, candidate_live=False)
    assert deleted is not None
    assert deleted.endswith("names revision 2, which is a delete")
