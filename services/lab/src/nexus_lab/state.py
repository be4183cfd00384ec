"""An eval run's state as a pure, idempotent fold of its NEXUS_EVALS events.

One JSON document per eval run (``lab.eval_runs.state``). `fold` reads nothing but the event
and the time JetStream stored it, so replaying the stream into empty tables gives the same
rows, and an event applied twice changes nothing: each change is guarded by what it creates
(a started case, a graded case) or by the status it moves from.
"""

from __future__ import annotations

from datetime import datetime

from nexus_events.events import Event
from nexus_events.events.evals import (
    AgentRevision,
    EvalAccepted,
    EvalCaseGraded,
    EvalCaseStarted,
    EvalCompleted,
    EvalFailed,
    EvalRequested,
    EvalStatus,
    GradeResult,
    RevisionSummary,
)
from pydantic import BaseModel, ConfigDict, Field

TERMINAL: frozenset[EvalStatus] = frozenset({EvalStatus.COMPLETED, EvalStatus.FAILED})


class _Document(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PlannedCase(_Document):
    """One (case, revision, trial) the eval run will run."""

    case: str
    agent_id: str
    revision: int
    trial: int

    @property
    def key(self) -> str:
        return case_key(self.case, self.agent_id, self.revision, self.trial)


class GradedCase(_Document):
    """A graded case run, as its `case_graded` recorded it."""

    run_id: str
    passed: bool
    grades: list[GradeResult] = Field(default_factory=list)
    status: str
    cost_usd: float = 0.0
    tokens: int = 0
    turns: int = 0
    wall_seconds: float = 0.0


class EvalState(_Document):
    eval_run_id: str
    suite: str
    requested_revision: int | None
    agents: list[str]
    requested_trials: int | None
    concurrency: int
    requested_by: str | None
    requested_at: datetime | None
    updated_at: datetime | None
    status: EvalStatus = EvalStatus.REQUESTED
    reason: str | None = None
    message: str = ""
    suite_revision: int | None = None
    trials: int = 0
    cases: list[str] = Field(default_factory=list)
    revisions: list[AgentRevision] = Field(default_factory=list)
    # Every planned (case, revision, trial), in the order they are started.
    planned: list[PlannedCase] = Field(default_factory=list)
    started: dict[str, str] = Field(default_factory=dict)  # case key -> run id
    graded: dict[str, GradedCase] = Field(default_factory=dict)  # case key -> grade
    summaries: list[RevisionSummary] = Field(default_factory=list)
    flipped: list[str] = Field(default_factory=list)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def live(self) -> list[str]:
        """Keys of the started case runs not graded yet."""
        return [k for k in self.started if k not in self.graded]

    def key_of_run(self, run_id: str) -> str | None:
        return next((k for k, r in self.started.items() if r == run_id), None)

    def planned_case(self, key: str) -> PlannedCase | None:
        return next((p for p in self.planned if p.key == key), None)

    def document(self) -> str:
        return self.model_dump_json()

    @classmethod
    def load(cls, raw: str | bytes) -> EvalState:
        return cls.model_validate_json(raw)


def case_key(case: str, agent_id: str, revision: int, trial: int) -> str:
    """``<case>/<agent>@<revision>/<trial>``: one planned case run."""
    return f"{case}/{agent_id}@{revision}/{trial}"


def plan(cases: list[str], revisions: list[AgentRevision], trials: int) -> list[PlannedCase]:
    """Trial by trial, then case by case, each revision in turn: with bounded concurrency the
    revisions advance together, so a report read half-way compares like with like."""
    return [
        PlannedCase(case=c, agent_id=r.agent_id, revision=r.revision, trial=t)
        for t in range(1, trials + 1)
        for c in cases
        for r in revisions
    ]


def fold(  # noqa: PLR0911 - one return per kind of event
    state: EvalState | None, eval_run_id: str, event: Event, at: datetime | None
) -> EvalState | None:
    """The state after `event`; `state` itself when the event changes nothing."""
    if isinstance(event, EvalRequested):
        if state is not None:
            return state  # the first request of an id is the one
        return EvalState(
            eval_run_id=eval_run_id,
            suite=event.suite,
            requested_revision=event.suite_revision,
            agents=list(event.agents),
            requested_trials=event.trials,
            concurrency=event.concurrency,
            requested_by=event.requested_by,
            requested_at=at,
            updated_at=at,
        )
    if state is None or state.terminal:
        return state
    new = state.model_copy(deep=True)
    new.updated_at = at
    if isinstance(event, EvalAccepted):
        if state.status != EvalStatus.REQUESTED:
            return state
        new.status = EvalStatus.RUNNING
        new.suite_revision = event.suite_revision
        new.cases = list(event.cases)
        new.revisions = list(event.revisions)
        new.trials = event.trials
        new.concurrency = event.concurrency
        new.planned = plan(new.cases, new.revisions, new.trials)
    elif isinstance(event, EvalCaseStarted):
        key = case_key(event.case, event.agent_id, event.revision, event.trial)
        if key in state.started:
            return state
        new.started[key] = event.run_id
    elif isinstance(event, EvalCaseGraded):
        key = case_key(event.case, event.agent_id, event.revision, event.trial)
        if key in state.graded:
            return state
        new.started.setdefault(key, event.run_id)
        new.graded[key] = GradedCase(
            run_id=event.run_id,
            passed=event.passed,
            grades=list(event.grades),
            status=event.status,
            cost_usd=event.cost_usd,
            tokens=event.tokens_in + event.tokens_out,
            turns=event.turns,
            wall_seconds=event.wall_seconds,
        )
    elif isinstance(event, EvalCompleted):
        new.status = EvalStatus.COMPLETED
        new.summaries = list(event.revisions)
        new.flipped = list(event.flipped)
    elif isinstance(event, EvalFailed):
        new.status = EvalStatus.FAILED
        new.reason = event.reason
        new.message = event.message
    else:
        return state
    return new


__all__ = ["EvalState", "GradedCase", "PlannedCase", "case_key", "fold", "plan"]
