"""Which budgets cover a run, and the ledger keys a model call is counted under: pure.

A run's scopes (`RunScopes`) come from its request (the flow labels) and its `prepared`
config (team, agent, revision, model). Every call is settled under one ledger key per scope
kind the run has and per period (`call_keys`), whether or not a budget names it yet; a budget
covers a run when its scope kind is one the run has and its name (if any) is the run's
(`covering`), and is checked against the ledger key of its own period.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from nexus_events.events.budgets import (
    BudgetDefinition,
    BudgetPeriod,
    ScopeKind,
    period_bucket,
)


@dataclass(frozen=True, slots=True, order=True)
class LedgerKey:
    """One row of the ledger: a scope instance in one period bucket. Ordered, so that every
    transaction locks the rows of several keys in the same order (no deadlock)."""

    scope: str  # ScopeKind value
    name: str  # '' for global
    period: str  # BudgetPeriod value
    bucket: str  # period_bucket(...)

    @property
    def instance(self) -> str:
        """``team:alpha``, ``global``: the scope instance as every surface names it."""
        return self.scope if not self.name else f"{self.scope}:{self.name}"


@dataclass(frozen=True, slots=True)
class RunScopes:
    """What a run counts against."""

    run_id: str
    agent_id: str | None = None
    team: str | None = None
    task_id: str | None = None
    flow: str | None = None
    flow_run_id: str | None = None

    def instances(self) -> dict[ScopeKind, str]:
        """The name of each scope kind the run has ('' for global)."""
        named: dict[ScopeKind, str | None] = {
            ScopeKind.GLOBAL: "",
            ScopeKind.TEAM: self.team,
            ScopeKind.AGENT: self.agent_id,
            ScopeKind.TASK: self.task_id,
            ScopeKind.FLOW_RUN: self.flow_run_id,
        }
        return {kind: name for kind, name in named.items() if name is not None}


def call_keys(scopes: RunScopes, at: datetime) -> list[LedgerKey]:
    """Every ledger key a call of this run made at `at` is settled under, sorted."""
    keys = [
        LedgerKey(str(kind), name, str(period), period_bucket(period, at))
        for kind, name in scopes.instances().items()
        for period in BudgetPeriod
    ]
    return sorted(keys)


@dataclass(frozen=True, slots=True)
class Coverage:
    """One budget covering one run: the budget, its revision and the ledger key it checks."""

    budget: BudgetDefinition
    revision: int
    key: LedgerKey


def covers(budget: BudgetDefinition, scopes: RunScopes) -> str | None:
    """The name of the scope instance `budget` covers the run under ('' for global), or None
    when it does not cover it. A flow_run budget named after a flow covers that flow's runs."""
    scope = budget.scope
    name = scopes.instances().get(scope.kind)
    if name is None:
        return None
    if scope.name is None:
        return name
    if scope.kind is ScopeKind.FLOW_RUN:
        return name if scopes.flow == scope.name else None
    return name if scope.name == name else None


def covering(
    budgets: Iterable[tuple[BudgetDefinition, int]], scopes: RunScopes, at: datetime
) -> list[Coverage]:
    """The budgets (with their revisions) that cover the run at `at`, by ledger key then id."""
    out = []
    for budget, revision in budgets:
        name = covers(budget, scopes)
        if name is None:
            continue
        period = budget.period
        key = LedgerKey(str(budget.scope.kind), name, str(period), period_bucket(period, at))
        out.append(Coverage(budget, revision, key))
    return sorted(out, key=lambda c: (c.key, c.budget.id))
