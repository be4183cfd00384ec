"""Budgets (docs/spend.md): the catalog's budget definitions and the spend service's record.

A budget caps what the runs of one scope spend in one period: ``scope: team:alpha``,
``period: month``, ``limits: {cost_usd: 50}``. It is a catalog item (kind ``budget``,
``nexus budgets apply``), revisioned like agents. Before each model call the runner reserves
the call's estimated cost against every budget that covers its run; a budget reached either
stops the runs (``on_exceed: stop``) or pauses them and asks its approvers to extend it
(``on_exceed: ask``). The spend service records the asks, extensions and thresholds on
``nexus.budget.v1.<key>.<event>`` (NEXUS_BUDGETS), the key being the ask's id for an ask and
the budget's id for a threshold.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from nexus_events.contract.approver_policy import parse_principals
from nexus_events.contract.subjects import Family, validate_token
from nexus_events.events.base import Command, Event, register
from nexus_events.events.specs import Spec


class ScopeKind(StrEnum):
    """What a budget covers: every run, a team's, an agent's, a task's or a flow run's."""

    GLOBAL = "global"
    TEAM = "team"
    AGENT = "agent"
    TASK = "task"
    FLOW_RUN = "flow_run"


class BudgetPeriod(StrEnum):
    """The window a budget's spend is counted in: a UTC calendar day, ISO week or month, or
    the scope's whole life (`total`, the natural one for a task or a flow run)."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    TOTAL = "total"


class OnExceed(StrEnum):
    """What a reached budget does to the runs it covers."""

    STOP = "stop"  # the run ends failed, reason budget_exceeded, naming the scope
    ASK = "ask"  # the run pauses and the budget's approvers are asked to extend it


class BudgetScope(Spec):
    """``kind`` and, for team/agent/task/flow_run, the ``name`` of the one it covers (a team
    name, an agent id, a task id, a flow id); no name covers each one of that kind on its
    own (``scope: task`` gives every task the same budget). Written ``team:alpha`` in YAML."""

    kind: ScopeKind = Field(..., description="global, team, agent, task or flow_run.")
    name: str | None = Field(
        None,
        description="The team, agent id, task id or flow id covered; None = each one of its"
        " kind on its own (never set for global).",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        kind, _, name = value.strip().partition(":")
        return {"kind": _scope_kind(kind), "name": name or None}

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        return _scope_kind(value) if isinstance(value, str) else value

    @field_validator("name")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "scope name")

    @model_validator(mode="after")
    def _global_unnamed(self) -> BudgetScope:
        if self.kind is ScopeKind.GLOBAL and self.name is not None:
            raise ValueError("scope global covers every run: it takes no name")
        return self

    def label(self) -> str:
        """``team:alpha``, ``task`` (each task), ``global``: how every surface names it."""
        return str(self.kind) if self.name is None else f"{self.kind}:{self.name}"


def _scope_kind(text: str) -> str:
    if text not in set(ScopeKind):
        raise ValueError(f"unknown scope {text!r} (one of {', '.join(ScopeKind)})")
    return text


class BudgetLimits(Spec):
    """At least one limit; a limit of 0 allows nothing (a frozen scope)."""

    cost_usd: float | None = Field(None, ge=0, description="Most USD spent in the period.")
    tokens: int | None = Field(None, ge=0, description="Most tokens (in + out) in the period.")
    runs: int | None = Field(None, ge=0, description="Most runs started in the period.")

    @model_validator(mode="after")
    def _some(self) -> BudgetLimits:
        if self.cost_usd is None and self.tokens is None and self.runs is None:
            raise ValueError("limits name none of cost_usd, tokens, runs")
        return self


class BudgetAsk(Spec):
    """How an `ask` budget asks: by how much one approval extends it, who decides, and how
    long the question stands before it counts as denied."""

    extend_cost_usd: float = Field(
        0.0, ge=0, description="USD one approval adds to the period's cost limit."
    )
    extend_tokens: int = Field(0, ge=0, description="Tokens one approval adds.")
    extend_runs: int = Field(0, ge=0, description="Runs one approval adds.")
    approvers: list[str] | None = Field(
        None,
        description="Who may extend it (docs/approvals.md principals); None = team:<name> for"
        " a named team scope, else the deployment's default (NEXUS_APPROVERS_DEFAULT).",
    )
    expires_in: int = Field(
        3600, gt=0, le=7 * 24 * 3600, description="Seconds the question stands before denial."
    )

    @field_validator("approvers")
    @classmethod
    def _approvers(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(parse_principals(value))


class BudgetDefinition(Spec):
    """One budget, as an operator writes it (YAML, ``nexus budgets apply``)."""

    id: str = Field(..., description="Budget id, a subject token.")
    description: str = Field("", description="What the budget is for.")
    scope: BudgetScope = Field(..., description="What it covers, e.g. team:alpha.")
    period: BudgetPeriod = Field(..., description="day, week, month or total (UTC calendar).")
    limits: BudgetLimits = Field(..., description="cost_usd, tokens and/or runs.")
    on_exceed: OnExceed = Field(OnExceed.STOP, description="stop or ask.")
    ask: BudgetAsk = Field(default_factory=BudgetAsk, description="How `ask` asks.")
    warn_at: float = Field(
        0.8, gt=0, le=1, description="Share of a limit that is announced once per period."
    )

    @field_validator("id")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "budget id")

    @field_validator("period", mode="before")
    @classmethod
    def _period(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in set(BudgetPeriod):
            raise ValueError(f"period {value!r} does not parse (one of {', '.join(BudgetPeriod)})")
        return value

    @model_validator(mode="after")
    def _ask_extends(self) -> BudgetDefinition:
        a = self.ask
        if self.on_exceed is OnExceed.ASK and not (
            a.extend_cost_usd or a.extend_tokens or a.extend_runs
        ):
            raise ValueError(
                "on_exceed ask needs ask.extend_cost_usd, extend_tokens or extend_runs"
            )
        return self

    def approvers(self) -> list[str] | None:
        """Who decides its asks: the ask's, else the named team, else None (the default)."""
        if self.ask.approvers is not None:
            return self.ask.approvers
        if self.scope.kind is ScopeKind.TEAM and self.scope.name is not None:
            return [f"team:{self.scope.name}"]
        return None


def period_bucket(period: BudgetPeriod, at: datetime) -> str:
    """The period `at` falls in, as a label: ``2026-11-28``, ``2026-W48``, ``2026-11``,
    ``total``. Times are UTC (a naive one is taken as UTC)."""
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if period is BudgetPeriod.DAY:
        return at.strftime("%Y-%m-%d")
    if period is BudgetPeriod.WEEK:
        year, week, _ = at.isocalendar()
        return f"{year}-W{week:02d}"
    if period is BudgetPeriod.MONTH:
        return at.strftime("%Y-%m")
    return "total"


def period_end(period: BudgetPeriod, at: datetime) -> datetime | None:
    """When the period `at` falls in ends (UTC), None for `total`."""
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is BudgetPeriod.DAY:
        return day + timedelta(days=1)
    if period is BudgetPeriod.WEEK:
        return day + timedelta(days=7 - day.weekday())
    if period is BudgetPeriod.MONTH:
        first = day.replace(day=1)
        return (first + timedelta(days=32)).replace(day=1)
    return None


def ask_id(budget_id: str, instance: str, bucket: str, round: int) -> str:
    """The id of one ask (round `round` of budget `budget_id` for scope `instance` in period
    `bucket`): a subject token, also the pseudo-run id its approval is asked under."""
    digest = hashlib.sha256(f"{budget_id}\0{instance}\0{bucket}\0{round}".encode()).hexdigest()
    return f"budget-ask-{digest[:20]}"


# The tool name of a budget ask's `approval_requested` (a pseudo-run, as a flow gate's is).
BUDGET_ASK_TOOL = "budget_extend"


class _CatalogCommand(Command):
    event_family: ClassVar[Family] = Family.CATALOG


@register
class BudgetApplied(_CatalogCommand):
    event_name: ClassVar[str] = "budget.applied"

    budget: BudgetDefinition = Field(..., description="The whole budget.")
    applied_by: str | None = Field(None, description="Who applied it.")


@register
class BudgetDeleted(_CatalogCommand):
    event_name: ClassVar[str] = "budget.deleted"

    deleted_by: str | None = Field(None, description="Who deleted it.")


# -- the spend service's record (NEXUS_BUDGETS) ---------------------------------------------


class BudgetEvent(StrEnum):
    """The name of every budget event: the last token of ``nexus.budget.v1.<key>.<event>``."""

    ASK_OPENED = "ask_opened"
    EXTENDED = "extended"
    ASK_CLOSED = "ask_closed"
    THRESHOLD_CROSSED = "threshold_crossed"


class _BudgetEvent(Event):
    event_family: ClassVar[Family] = Family.BUDGET

    budget_id: str = Field(..., description="The budget.")
    revision: int = Field(..., ge=1, description="The budget's catalog revision.")
    instance: str = Field(
        ..., description="The scope it is about: team:alpha, task:T-1, global ..."
    )
    bucket: str = Field(..., description="The period: 2026-11, 2026-W48, 2026-11-28, total.")


@register
class BudgetAskOpened(_BudgetEvent):
    """A budget with ``on_exceed: ask`` was reached: its approvers are asked (an
    ``approval_requested`` on the pseudo-run ``ask_id``, tool ``budget_extend``)."""

    event_name: ClassVar[str] = BudgetEvent.ASK_OPENED

    ask_id: str = Field(..., description="The ask, also the approval's pseudo-run id.")
    round: int = Field(..., ge=1, description="The how-many-th ask of this scope and period.")
    approval_id: str = Field(..., description="The approval's id under the pseudo-run.")
    extend_cost_usd: float = Field(0.0, ge=0, description="USD an approval adds.")
    extend_tokens: int = Field(0, ge=0, description="Tokens an approval adds.")
    extend_runs: int = Field(0, ge=0, description="Runs an approval adds.")
    approvers: list[str] | None = Field(
        None, description="Who may decide it; None = the deployment's default."
    )
    spent_cost_usd: float = Field(0.0, ge=0, description="Spent in the period when asked.")
    limit_cost_usd: float | None = Field(None, ge=0, description="The limit reached (USD).")
    expires_at: datetime = Field(..., description="After this the ask counts as denied.")
    asked_for_run: str | None = Field(None, description="The run whose call reached it.")


@register
class BudgetExtended(_BudgetEvent):
    """An ask was approved: the period's limits grow by the ask's amounts."""

    event_name: ClassVar[str] = BudgetEvent.EXTENDED

    ask_id: str = Field(..., description="The ask approved.")
    cost_usd: float = Field(0.0, ge=0, description="USD added.")
    tokens: int = Field(0, ge=0, description="Tokens added.")
    runs: int = Field(0, ge=0, description="Runs added.")
    decided_by: str | None = Field(None, description="Who approved.")
    surface: str | None = Field(None, description="Where (cli, slack, plane, console ...).")


@register
class BudgetAskClosed(_BudgetEvent):
    """An ask was denied or expired: the runs waiting on it end ``budget_exceeded``, and the
    scope stays closed for the rest of the period (or until the budget changes)."""

    event_name: ClassVar[str] = BudgetEvent.ASK_CLOSED

    ask_id: str = Field(..., description="The ask closed.")
    decision: Literal["denied", "expired"] = Field(..., description="How it closed.")
    decided_by: str | None = Field(None, description="Who denied it.")


@register
class BudgetThresholdCrossed(_BudgetEvent):
    """A scope's spend passed the budget's ``warn_at`` share of a limit: announced once per
    (budget revision, scope, period) (plane-sync comments on the task)."""

    event_name: ClassVar[str] = BudgetEvent.THRESHOLD_CROSSED

    share: float = Field(..., ge=0, description="Spent / limit when crossed (0.8 = 80 %).")
    spent_cost_usd: float = Field(0.0, ge=0, description="Spent in the period (USD).")
    limit_cost_usd: float | None = Field(None, ge=0, description="The cost limit, if any.")
    spent_tokens: int = Field(0, ge=0, description="Tokens spent in the period.")
    limit_tokens: int | None = Field(None, ge=0, description="The token limit, if any.")
    task_id: str | None = Field(None, description="The task the scope is about, if any.")
    flow_run_id: str | None = Field(None, description="The flow run it is about, if any.")
