"""Evaluation suites and eval runs (docs/lab.md).

A suite is a revisioned catalog item (``nexus.catalog.v1.eval.<id>.applied``): cases (a task
input, a repository at a commit, or a golden run) and graders. An eval run
(``nexus.eval.v1.<eval_run_id>.<event>``, NEXUS_EVALS) runs every case of a suite for each
agent revision asked, `trials` times, through the normal scheduler, and grades each run; its
report is a projection of these events, so it can always be rebuilt.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from nexus_events.contract.subjects import Family, validate_token
from nexus_events.events.base import Command, Event, register
from nexus_events.events.specs import RepoSpec, Spec

# -- graders -------------------------------------------------------------------------------


class _Grader(Spec):
    name: str | None = Field(None, description="Name shown in reports; default: its kind.")

    def label(self) -> str:
        return self.name or str(getattr(self, "kind", "grader"))


class CompletedGrader(_Grader):
    """The case's run completed (every case has it implicitly)."""

    kind: Literal["completed"] = Field("completed", description="The grader's kind.")


class TestsPassGrader(_Grader):
    """The run's result says its last test run passed (`result.tests_passed`)."""

    kind: Literal["tests_pass"] = Field("tests_pass", description="The grader's kind.")


class DetailsMatchGrader(_Grader):
    """A `finish.details` field (a dotted path) equals a value or matches a regex."""

    kind: Literal["details_match"] = Field("details_match", description="The grader's kind.")
    field: str = Field(..., min_length=1, description="Dotted path into finish.details.")
    equals: Any = Field(None, description="The value it must equal.")
    matches: str | None = Field(None, description="A regex its text form must match (search).")

    @model_validator(mode="after")
    def _one(self) -> DetailsMatchGrader:
        if (self.equals is None) == (self.matches is None):
            raise ValueError("details_match needs exactly one of equals or matches")
        if self.matches is not None:
            try:
                re.compile(self.matches)
            except re.error as exc:
                raise ValueError(f"details_match: bad regex {self.matches!r}: {exc}") from None
        return self


class ReviewerGrader(_Grader):
    """A reviewer agent's verdict: a run of `agent` on the case run's result passes when its
    `finish.details[field]` equals `approve`."""

    kind: Literal["reviewer"] = Field("reviewer", description="The grader's kind.")
    agent: str = Field(..., description="The reviewer agent's id.")
    field: str = Field("verdict", min_length=1, description="The verdict's details field.")
    approve: str = Field("approve", description="The verdict value that passes.")

    @field_validator("agent")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "reviewer agent id")


class MaxCostGrader(_Grader):
    """The run cost at most `usd`."""

    kind: Literal["max_cost"] = Field("max_cost", description="The grader's kind.")
    usd: float = Field(..., ge=0, description="Most the run may cost.")


class MaxTurnsGrader(_Grader):
    """The run took at most `turns` model turns."""

    kind: Literal["max_turns"] = Field("max_turns", description="The grader's kind.")
    turns: int = Field(..., ge=1, description="Most model turns the run may take.")


class ForbiddenToolsGrader(_Grader):
    """The run never called any of `tools`."""

    kind: Literal["forbidden_tools"] = Field("forbidden_tools", description="The grader's kind.")
    tools: list[str] = Field(..., min_length=1, description="Tools the run must not call.")


Grader = Annotated[
    CompletedGrader
    | TestsPassGrader
    | DetailsMatchGrader
    | ReviewerGrader
    | MaxCostGrader
    | MaxTurnsGrader
    | ForbiddenToolsGrader,
    Field(discriminator="kind"),
]
GRADER_KINDS = (
    "completed",
    "tests_pass",
    "details_match",
    "reviewer",
    "max_cost",
    "max_turns",
    "forbidden_tools",
)

# -- suites --------------------------------------------------------------------------------


class EvalCase(Spec):
    """One case: a task input (with a repository at a commit), or a golden run whose input,
    repository and starting commit it takes."""

    id: str = Field(..., description="Case id, a subject token.")
    input: str | None = Field(None, description="The task input.")
    repo: RepoSpec | None = Field(None, description="The repository, `ref` its commit.")
    golden: str | None = Field(None, description="A golden run's id: its input and repository.")
    graders: list[Grader] = Field(
        default_factory=list, description="This case's graders, after the suite's."
    )

    @field_validator("id", "golden")
    @classmethod
    def _tokens(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "case id")

    @model_validator(mode="after")
    def _source(self) -> EvalCase:
        if (self.input is None) == (self.golden is None):
            raise ValueError(f"case {self.id}: give exactly one of input or golden")
        return self


class EvalSuite(Spec):
    """An evaluation suite (``evals/*.yaml``)."""

    id: str = Field(..., description="Suite id, a subject token.")
    description: str = Field("", description="What the suite checks.")
    agent: str | None = Field(None, description="The agent it evaluates by default.")
    trials: int = Field(1, ge=1, le=100, description="Default trials per case and revision.")
    graders: list[Grader] = Field(default_factory=list, description="Graders of every case.")
    cases: list[EvalCase] = Field(..., min_length=1, description="The cases.")

    @field_validator("id", "agent")
    @classmethod
    def _tokens(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "id")

    @model_validator(mode="after")
    def _unique_cases(self) -> EvalSuite:
        seen: set[str] = set()
        for case in self.cases:
            if case.id in seen:
                raise ValueError(f"case {case.id} appears twice")
            seen.add(case.id)
        return self


class _CatalogCommand(Command):
    event_family: ClassVar[Family] = Family.CATALOG


@register
class EvalApplied(_CatalogCommand):
    event_name: ClassVar[str] = "eval.applied"

    suite: EvalSuite = Field(..., description="The whole suite.")
    applied_by: str | None = Field(None, description="Who applied it.")


@register
class EvalDeleted(_CatalogCommand):
    event_name: ClassVar[str] = "eval.deleted"

    deleted_by: str | None = Field(None, description="Who deleted it.")


# -- eval runs -----------------------------------------------------------------------------


class EvalEvent(StrEnum):
    """The name of every eval-run event: the last token of ``nexus.eval.v1.<id>.<event>``."""

    REQUESTED = "requested"
    ACCEPTED = "accepted"
    CASE_STARTED = "case_started"
    CASE_GRADED = "case_graded"
    COMPLETED = "completed"
    FAILED = "failed"


class EvalStatus(StrEnum):
    """Where an eval run is: the values of `EvalReport.status`, for code that names them."""

    REQUESTED = "requested"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class AgentRevision(BaseModel):
    """One agent revision an eval run compares."""

    agent_id: str = Field(..., description="The agent's id.")
    revision: int = Field(..., ge=1, description="Its catalog revision.")

    def label(self) -> str:
        return f"{self.agent_id}@{self.revision}"

    @classmethod
    def parse(cls, text: str) -> AgentRevision:
        """``implementer@3`` -> AgentRevision; a ValueError names what is wrong."""
        agent, sep, revision = text.partition("@")
        if not sep or not revision.isdigit() or int(revision) < 1:
            raise ValueError(f"{text!r}: write an agent revision as AGENT@N (N from 1)")
        return cls(agent_id=validate_token(agent, "agent id"), revision=int(revision))


class _EvalEvent(Event):
    event_family: ClassVar[Family] = Family.EVAL


@register
class EvalRequested(Command):
    """Run a suite for agent revisions. On ``nexus.eval.v1.new.requested`` the lab picks the
    id."""

    event_family: ClassVar[Family] = Family.EVAL
    event_name: ClassVar[str] = EvalEvent.REQUESTED

    suite: str = Field(..., description="The suite's id.")
    suite_revision: int | None = Field(None, ge=1, description="Its revision; None = latest.")
    agents: list[str] = Field(
        ..., min_length=1, description="Agent revisions to compare, each AGENT@N."
    )
    trials: int | None = Field(None, ge=1, le=100, description="Trials; None = the suite's.")
    concurrency: int = Field(4, ge=1, le=64, description="Most case runs at once.")
    requested_by: str | None = Field(None, description="Who asked.")

    @field_validator("suite")
    @classmethod
    def _suite(cls, value: str) -> str:
        return validate_token(value, "suite id")

    @field_validator("agents")
    @classmethod
    def _agents(cls, value: list[str]) -> list[str]:
        for text in value:
            AgentRevision.parse(text)
        if len(set(value)) != len(value):
            raise ValueError("an agent revision is named twice")
        return value


@register
class EvalAccepted(_EvalEvent):
    """The lab pinned the suite revision and planned every (case, revision, trial)."""

    event_name: ClassVar[str] = EvalEvent.ACCEPTED

    suite: str = Field(..., description="The suite's id.")
    suite_revision: int = Field(..., ge=1, description="The revision pinned.")
    cases: list[str] = Field(..., description="The case ids, in order.")
    revisions: list[AgentRevision] = Field(..., description="The revisions compared.")
    trials: int = Field(..., ge=1, description="Trials per case and revision.")
    concurrency: int = Field(..., ge=1, description="Most case runs at once.")


@register
class EvalCaseStarted(_EvalEvent):
    """A case run was requested."""

    event_name: ClassVar[str] = EvalEvent.CASE_STARTED

    case: str = Field(..., description="The case id.")
    agent_id: str = Field(..., description="The agent.")
    revision: int = Field(..., ge=1, description="The agent revision.")
    trial: int = Field(..., ge=1, description="The trial, from 1.")
    run_id: str = Field(..., description="The case's run.")


class GradeResult(BaseModel):
    """One grader's verdict on one case run."""

    grader: str = Field(..., description="The grader's name.")
    passed: bool = Field(..., description="Whether it passed.")
    reason: str = Field("", description="Why not (or what it saw), one line.")


@register
class EvalCaseGraded(_EvalEvent):
    """A case run ended and was graded: the case passes only when every grader passes."""

    event_name: ClassVar[str] = EvalEvent.CASE_GRADED

    case: str = Field(..., description="The case id.")
    agent_id: str = Field(..., description="The agent.")
    revision: int = Field(..., ge=1, description="The agent revision.")
    trial: int = Field(..., ge=1, description="The trial, from 1.")
    run_id: str = Field(..., description="The case's run.")
    passed: bool = Field(..., description="Every grader passed.")
    grades: list[GradeResult] = Field(default_factory=list, description="Each grader's verdict.")
    status: str = Field(..., description="The run's terminal status.")
    cost_usd: float = Field(0.0, ge=0, description="The run's cost.")
    tokens_in: int = Field(0, ge=0, description="Prompt tokens.")
    tokens_out: int = Field(0, ge=0, description="Completion tokens.")
    turns: int = Field(0, ge=0, description="Model turns.")
    wall_seconds: float = Field(0.0, ge=0, description="From requested to its ending.")


class RevisionSummary(BaseModel):
    """One revision's results in an eval report."""

    agent_id: str = Field(..., description="The agent.")
    revision: int = Field(..., ge=1, description="The agent revision.")
    graded: int = Field(0, ge=0, description="Case runs graded.")
    passed: int = Field(0, ge=0, description="Case runs that passed.")
    pass_rate: float = Field(0.0, ge=0, le=1, description="passed / graded.")
    ci_low: float = Field(0.0, ge=0, le=1, description="Wilson 95% interval, low end.")
    ci_high: float = Field(0.0, ge=0, le=1, description="Wilson 95% interval, high end.")
    cost_usd: float = Field(0.0, ge=0, description="Mean cost per case run.")
    tokens: float = Field(0.0, ge=0, description="Mean tokens (in + out) per case run.")
    turns: float = Field(0.0, ge=0, description="Mean turns per case run.")
    wall_seconds: float = Field(0.0, ge=0, description="Mean wall time per case run.")


@register
class EvalCompleted(_EvalEvent):
    """Every planned case run was graded."""

    event_name: ClassVar[str] = EvalEvent.COMPLETED

    revisions: list[RevisionSummary] = Field(..., description="Per revision.")
    flipped: list[str] = Field(
        default_factory=list, description="Cases whose majority verdict differs by revision."
    )


@register
class EvalFailed(_EvalEvent):
    """The eval run could not go on (an unknown suite, agent or revision)."""

    event_name: ClassVar[str] = EvalEvent.FAILED

    reason: str = Field(..., description="A reason code: unknown_suite, unknown_agent, ...")
    message: str = Field("", description="One line for a person.")


# -- queries (nexus.lab.v1.evals.*) --------------------------------------------------------


class EvalGetRequest(BaseModel):
    """One eval run's report."""

    eval_run_id: str = Field(..., description="The eval run.")


class EvalListRequest(BaseModel):
    """The eval runs, newest first."""

    suite: str | None = Field(None, description="Only this suite's eval runs.")
    limit: int = Field(50, ge=1, le=500, description="Most eval runs, newest first.")


class CaseCell(BaseModel):
    """One (case, revision) of a report: its trials."""

    case: str = Field(..., description="The case id.")
    agent_id: str = Field(..., description="The agent.")
    revision: int = Field(..., ge=1, description="The agent revision.")
    trials: int = Field(0, ge=0, description="Trials graded.")
    passed: int = Field(0, ge=0, description="Trials that passed.")
    runs: list[str] = Field(default_factory=list, description="The trials' run ids.")
    reasons: list[str] = Field(default_factory=list, description="Why trials failed.")
    cost_usd: float = Field(0.0, ge=0, description="Mean cost per trial.")
    tokens: float = Field(0.0, ge=0, description="Mean tokens per trial.")
    turns: float = Field(0.0, ge=0, description="Mean turns per trial.")
    wall_seconds: float = Field(0.0, ge=0, description="Mean wall time per trial.")


class EvalReport(BaseModel):
    """An eval run as its events give it."""

    eval_run_id: str = Field(..., description="The eval run.")
    suite: str = Field(..., description="The suite's id.")
    suite_revision: int | None = Field(None, description="The suite revision pinned.")
    status: Literal["requested", "running", "completed", "failed"] = Field(
        "requested", description="Where the eval run is."
    )
    message: str = Field("", description="Why it failed, if it did.")
    planned: int = Field(0, ge=0, description="Case runs planned.")
    graded: int = Field(0, ge=0, description="Case runs graded so far.")
    revisions: list[RevisionSummary] = Field(default_factory=list, description="Per revision.")
    cases: list[CaseCell] = Field(default_factory=list, description="Per case and revision.")
    flipped: list[str] = Field(
        default_factory=list, description="Cases whose majority verdict differs by revision."
    )
    requested_by: str | None = Field(None, description="Who asked.")


class EvalListReply(BaseModel):
    """Eval runs, newest first."""

    evals: list[EvalReport] = Field(default_factory=list, description="The eval runs.")


__all__ = [
    "GRADER_KINDS",
    "AgentRevision",
    "CaseCell",
    "CompletedGrader",
    "DetailsMatchGrader",
    "EvalAccepted",
    "EvalApplied",
    "EvalCase",
    "EvalCaseGraded",
    "EvalCaseStarted",
    "EvalCompleted",
    "EvalDeleted",
    "EvalEvent",
    "EvalFailed",
    "EvalGetRequest",
    "EvalListReply",
    "EvalListRequest",
    "EvalReport",
    "EvalRequested",
    "EvalStatus",
    "EvalSuite",
    "ForbiddenToolsGrader",
    "GradeResult",
    "Grader",
    "MaxCostGrader",
    "MaxTurnsGrader",
    "ReviewerGrader",
    "RevisionSummary",
    "TestsPassGrader",
]
