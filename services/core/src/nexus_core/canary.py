"""An agent's canary as pure decisions (docs/lab.md): whether an apply naming one is refused,
and promote, roll back or wait from the outcomes of each arm's finished runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nexus_events.events.lab import ArmStats
from nexus_events.events.lab_specs import CanaryRule, CanarySpec


@dataclass(frozen=True)
class CanaryDecision:
    """What the policy said, and the condition that said it, in one line."""

    decision: Literal["promote", "rollback"]
    rule: str


def canary_refusal(
    agent_id: str, seq: int, revision: int, latest: int, candidate_live: bool
) -> str | None:
    """Why applying agent `agent_id` (stream sequence `seq`) with a canary on `revision` is
    refused, None if it is not: the candidate must be an existing, not deleted, earlier
    revision. `latest` is the agent's revision before this apply, `candidate_live` whether
    the candidate revision holds a definition."""
    what = f"agent {agent_id!r} (seq {seq}) not applied: its canary"
    if revision == latest + 1:
        return f"{what} names revision {revision}, the one it would be applied as"
    if revision > latest:
        return f"{what} names revision {revision}, which does not exist (latest {latest})"
    if not candidate_live:
        return f"{what} names revision {revision}, which is a delete"
    return None


def arm_stats(revision: int, runs: int, succeeded: int, cost_usd: float, turns: int) -> ArmStats:
    """One arm's outcomes from its finished runs' totals."""
    return ArmStats(
        revision=revision,
        runs=runs,
        succeeded=succeeded,
        success_rate=succeeded / runs if runs else 0.0,
        mean_cost_usd=round(cost_usd / runs, 6) if runs else 0.0,
        mean_turns=turns / runs if runs else 0.0,
    )


@dataclass(frozen=True)
class _Check:
    """One condition of a rule, judged on the two arms: whether it holds and how it reads."""

    holds: bool
    text: str


def _checks(rule: CanaryRule, candidate: ArmStats, current: ArmStats) -> list[_Check]:
    checks: list[_Check] = []
    if rule.min_success_rate is not None:
        rate = candidate.success_rate
        checks.append(
            _Check(
                rate >= rule.min_success_rate,
                f"candidate success rate {rate:.2f} vs min_success_rate {rule.min_success_rate:g}",
            )
        )
    if rule.max_success_drop is not None:
        drop = current.success_rate - candidate.success_rate
        checks.append(
            _Check(
                drop <= rule.max_success_drop + 1e-9,  # rates are ratios: equal within rounding
                f"success drop {drop:.2f} ({candidate.success_rate:.2f} vs"
                f" {current.success_rate:.2f}) vs max_success_drop {rule.max_success_drop:g}",
            )
        )
    if rule.max_cost_ratio is not None:
        base, cost = current.mean_cost_usd, candidate.mean_cost_usd
        ratio = (cost / base) if base > 0 else (1.0 if cost == 0 else float("inf"))
        checks.append(
            _Check(
                ratio <= rule.max_cost_ratio,
                f"cost ratio {ratio:.2f} (${cost:.4f} vs ${base:.4f}) vs max_cost_ratio"
                f" {rule.max_cost_ratio:g}",
            )
        )
    return checks


def _reached(rule: CanaryRule, candidate: ArmStats, current: ArmStats) -> bool:
    return candidate.runs >= rule.min_runs and current.runs >= rule.min_runs


def decide(candidate: ArmStats, current: ArmStats, spec: CanarySpec) -> CanaryDecision | None:
    """Roll back, promote, or None (wait for more runs).

    Each rule is judged once both arms have its `min_runs` finished runs. `rollback_when`'s
    conditions are limits the candidate must stay within: it rolls back as soon as any is
    breached (its success rate under `min_success_rate`, a drop over `max_success_drop`, a
    cost ratio over `max_cost_ratio`). `promote_when` promotes when every condition it gives
    holds. Rollback is judged first: a candidate that breaches a limit is never promoted.
    """
    rollback = spec.rollback_when
    if _reached(rollback, candidate, current):
        for check in _checks(rollback, candidate, current):
            if not check.holds:
                return CanaryDecision(
                    "rollback", f"rollback_when (min_runs {rollback.min_runs}): {check.text}"
                )
    promote = spec.promote_when
    if _reached(promote, candidate, current):
        checks = _checks(promote, candidate, current)
        if all(c.holds for c in checks):
            held = "; ".join(c.text for c in checks) or "no condition"
            return CanaryDecision("promote", f"promote_when (min_runs {promote.min_runs}): {held}")
    return None
