"""Bodies of the spend service's request/reply subjects (``nexus.spend.v1.*``, docs/spend.md).

Two are asked by other parts of Nexus on every run: the runner's reservation before each
model call (``nexus.spend.v1.reserve.<run_id>``) and the scheduler's admission check
(``nexus.spend.v1.admit.<run_id>``); the run id is the subject's last token, so a run's
credential may ask for its own run only. The rest are queries people and the console read.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from nexus_events.events.budgets import BudgetDefinition, BudgetPeriod, OnExceed
from nexus_events.events.queries import MAX_USAGE_ROWS, Query, Reply, Since, Token


class StandingState(StrEnum):
    """Where a scope stands against its budget in the current period."""

    OK = "ok"
    WARNING = "warning"  # past the budget's warn_at share
    EXHAUSTED = "exhausted"  # reached; on_exceed stop
    ASKING = "asking"  # reached; an ask is open
    DENIED = "denied"  # reached; the ask was denied or expired: closed for the period


class ScopeStanding(Reply):
    """One budget's scope in one period: spent (settled), reserved (calls in flight) and the
    limit with its extensions."""

    budget_id: str = Field(..., description="The budget.")
    instance: str = Field(..., description="The scope: team:alpha, task:T-1, global ...")
    period: BudgetPeriod = Field(..., description="day, week, month or total.")
    bucket: str = Field(..., description="The period's label, e.g. 2026-11.")
    on_exceed: OnExceed = Field(..., description="stop or ask.")
    state: StandingState = Field(..., description="ok, warning, exhausted, asking, denied.")
    spent_cost_usd: float = Field(0.0, description="Settled USD in the period.")
    reserved_cost_usd: float = Field(0.0, description="USD held by calls in flight.")
    limit_cost_usd: float | None = Field(None, description="Cost limit with extensions.")
    spent_tokens: int = Field(0, description="Settled tokens.")
    reserved_tokens: int = Field(0, description="Tokens held by calls in flight.")
    limit_tokens: int | None = Field(None, description="Token limit with extensions.")
    runs: int = Field(0, description="Runs admitted in the period.")
    limit_runs: int | None = Field(None, description="Run limit with extensions.")
    ask_id: str | None = Field(None, description="The open (or last closed) ask, if any.")

    def left_cost_usd(self) -> float | None:
        if self.limit_cost_usd is None:
            return None
        return max(0.0, self.limit_cost_usd - self.spent_cost_usd - self.reserved_cost_usd)


class SpendReserve(Query):
    """Body of ``nexus.spend.v1.reserve.<run_id>``: hold a model call's estimate."""

    turn: int = Field(..., ge=1, le=1_000_000, description="The turn the call is for.")
    attempt: int = Field(1, ge=1, le=100, description="The run's attempt.")
    cost_usd: float = Field(..., ge=0, le=1_000_000, description="Estimated USD of the call.")
    tokens: int = Field(..., ge=0, le=100_000_000, description="Estimated tokens (in + out).")


class SpendDecision(StrEnum):
    """What a reservation or an admission check answers."""

    GRANTED = "granted"
    WAIT = "wait"  # an ask is open: pause (a run) or stay queued (admission), ask again
    STOP = "stop"  # the scope is closed: end the run budget_exceeded


class SpendVerdict(Reply):
    """Reply of a reservation and of an admission check: granted, wait, or stop; on wait and
    stop `blocking` is the scope that said so (the run's ending names it)."""

    decision: SpendDecision = Field(..., description="granted, wait or stop.")
    scopes: list[ScopeStanding] = Field(
        default_factory=list, description="Every budget covering the run, as it now stands."
    )
    blocking: ScopeStanding | None = Field(None, description="The scope that refused.")
    message: str = Field("", description="One line for people: why, when not granted.")
    ask_run_id: str | None = Field(None, description="The open ask's pseudo-run id.")
    ask_approval_id: str | None = Field(None, description="The open ask's approval id.")


class SpendAdmit(Query):
    """Body of ``nexus.spend.v1.admit.<run_id>``: may this run start (its scopes' run
    limits and closed scopes)? Counts it against run limits when granted."""


class UsageGroup(StrEnum):
    """What a usage report groups runs by."""

    RUN = "run"
    TASK = "task"
    FLOW_RUN = "flow_run"
    FLOW = "flow"
    AGENT = "agent"
    AGENT_REVISION = "agent_revision"
    MODEL = "model"
    TEAM = "team"
    ORIGIN = "origin"
    DAY = "day"


class UsageQuery(Query):
    """Body of ``nexus.spend.v1.usage``: totals grouped by one key, optionally filtered."""

    by: UsageGroup = Field(UsageGroup.AGENT, description="The group key.")
    since: Since | None = Field(None, description="Runs requested at or after (naive = UTC).")
    until: Since | None = Field(None, description="Runs requested before (naive = UTC).")
    team: Token | None = Field(None, description="Only this team's runs.")
    agent_id: Token | None = Field(None, description="Only this agent's runs.")
    flow: Token | None = Field(None, description="Only this flow's runs.")
    task_id: Token | None = Field(None, description="Only this task's runs.")
    limit: int = Field(100, ge=1, le=MAX_USAGE_ROWS, description="Most rows.")


class UsageLine(Reply):
    """Totals of the runs sharing one key."""

    key: str | None = Field(..., description="The group's value; None: runs without one.")
    runs: int = Field(..., description="Runs.")
    turns: int = Field(..., description="Model calls settled.")
    tokens_in: int = Field(..., description="Prompt tokens.")
    tokens_out: int = Field(..., description="Completion tokens.")
    cost_usd: float = Field(..., description="USD.")
    wall_seconds: float = Field(..., description="Wall-clock seconds of the ended runs.")


class UsageReport(Reply):
    """Reply of ``nexus.spend.v1.usage``."""

    by: UsageGroup = Field(..., description="The group key.")
    rows: list[UsageLine] = Field(..., description="Costliest first; by day: oldest first.")
    total: UsageLine = Field(..., description="All the runs the filters kept (key None).")


class BudgetsList(Query):
    """Body of ``nexus.spend.v1.budgets.list``."""

    team: Token | None = Field(None, description="Only budgets of this team's scope.")


class BudgetGet(Query):
    """Body of ``nexus.spend.v1.budgets.get``."""

    id: Token = Field(..., description="The budget id.")


class BudgetView(Reply):
    """One budget, its revision and each scope it has seen in the current period."""

    revision: int = Field(..., description="Catalog revision.")
    budget: BudgetDefinition = Field(..., description="The definition.")
    standings: list[ScopeStanding] = Field(
        default_factory=list, description="Each scope instance in the current period."
    )


class BudgetsReply(Reply):
    budgets: list[BudgetView] = Field(..., description="By id.")


class RunsSpend(Query):
    """Body of ``nexus.spend.v1.runs``: each run's usage and its scopes' standing."""

    run_ids: list[Token] = Field(..., min_length=1, max_length=500, description="Runs.")


class RunSpend(Reply):
    run_id: str = Field(..., description="The run.")
    team: str | None = Field(None, description="The run's team.")
    usage: UsageLine = Field(..., description="The run's own totals (key: the run id).")
    scopes: list[ScopeStanding] = Field(
        default_factory=list, description="Every budget covering the run, current period."
    )
    waiting_for: str | None = Field(None, description="Why it waits on a budget, if it does.")


class RunsSpendReply(Reply):
    runs: list[RunSpend] = Field(..., description="In the order asked; unknown runs left out.")


# Every request and reply model of the spend service's subjects (for the schema snapshot).
REQUESTS: tuple[type[Query], ...] = (
    SpendReserve,
    SpendAdmit,
    UsageQuery,
    BudgetsList,
    BudgetGet,
    RunsSpend,
)
REPLIES: tuple[type[Reply], ...] = (
    SpendVerdict,
    UsageReport,
    BudgetsReply,
    BudgetView,
    RunsSpendReply,
)

__all__ = [
    "REPLIES",
    "REQUESTS",
    "BudgetGet",
    "BudgetView",
    "BudgetsList",
    "BudgetsReply",
    "RunSpend",
    "RunsSpend",
    "RunsSpendReply",
    "ScopeStanding",
    "SpendAdmit",
    "SpendDecision",
    "SpendReserve",
    "SpendVerdict",
    "StandingState",
    "UsageGroup",
    "UsageLine",
    "UsageQuery",
    "UsageReport",
]
