"""What an eval run still needs published, decided from its state alone (pure): accept or
refuse a request, start the next planned case runs within the concurrency bound, complete it
once every planned case is graded. Each outgoing event has a deterministic message id, so
deciding again (a restart, a second pass) publishes nothing twice in effect."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from nexus_events.contract import subjects
from nexus_events.events import Event
from nexus_events.events.evals import (
    AgentRevision,
    EvalAccepted,
    EvalCaseStarted,
    EvalCompleted,
    EvalFailed,
    EvalStatus,
    EvalSuite,
)
from nexus_events.transport.publish import Outgoing

from nexus_lab.report import cells, flipped, summaries
from nexus_lab.state import EvalState, PlannedCase, plan

# A case run's id leaves room for a reviewer run's suffix (``-rv<n>``) under 128 characters.
CASE_RUN_ID_MAX = 120


class FailReason(StrEnum):
    """The reason codes of `EvalFailed`."""

    UNKNOWN_SUITE = "unknown_suite"
    UNKNOWN_AGENT = "unknown_agent"


@dataclass(frozen=True)
class SuiteRevision:
    """One revision of a suite, as the lab's catalog projection holds it."""

    revision: int
    suite: EvalSuite


def case_run_id(eval_run_id: str, case: str, agent_id: str, revision: int, trial: int) -> str:
    """The run id of one planned case run, derived from all it is (a subject token): the
    digest keeps ids apart whatever the parts' spelling, the tail makes it readable."""
    parts = "\n".join((eval_run_id, case, agent_id, str(revision), str(trial)))
    digest = hashlib.sha256(parts.encode()).hexdigest()[:20]
    return f"ev-{digest}-{case}-{agent_id}-r{revision}-t{trial}"[:CASE_RUN_ID_MAX]


def reviewer_run_id(case_run_id: str, grader_index: int) -> str:
    """The run id of the reviewer run of one reviewer grader of a case run."""
    return f"{case_run_id}-rv{grader_index}"


def case_run_of_reviewer(run_id: str) -> tuple[str, int] | None:
    """(case run id, grader index) of a reviewer run id; None for any other id."""
    head, sep, index = run_id.rpartition("-rv")
    if not sep or not index.isdigit() or not head.startswith("ev-"):
        return None
    return head, int(index)


def _message(state: EvalState, event: Event, tail: str) -> Outgoing:
    fid = state.eval_run_id
    return Outgoing(
        subjects.eval_event(fid, event.event_name),
        event,
        msg_id=f"eval:{fid}:{event.event_name}{tail}",
    )


def refusal(state: EvalState, reason: str, message: str) -> Outgoing:
    return _message(state, EvalFailed(reason=reason, message=message), "")


def started(state: EvalState, planned: PlannedCase) -> Outgoing:
    run_id = case_run_id(
        state.eval_run_id, planned.case, planned.agent_id, planned.revision, planned.trial
    )
    event = EvalCaseStarted(
        case=planned.case,
        agent_id=planned.agent_id,
        revision=planned.revision,
        trial=planned.trial,
        run_id=run_id,
    )
    return _message(state, event, f":{planned.key}")


def _accept(
    state: EvalState, suite: SuiteRevision | None, unknown_agents: Sequence[str]
) -> list[Outgoing]:
    if suite is None:
        which = f" revision {state.requested_revision}" if state.requested_revision else ""
        return [refusal(state, FailReason.UNKNOWN_SUITE, f"no eval suite {state.suite}{which}")]
    if unknown_agents:
        names = ", ".join(unknown_agents)
        return [refusal(state, FailReason.UNKNOWN_AGENT, f"no agent revision {names}")]
    revisions = [AgentRevision.parse(a) for a in state.agents]
    accepted = EvalAccepted(
        suite=state.suite,
        suite_revision=suite.revision,
        cases=[c.id for c in suite.suite.cases],
        revisions=revisions,
        trials=state.requested_trials or suite.suite.trials,
        concurrency=state.concurrency,
    )
    return [_message(state, accepted, "")]


def decide(
    state: EvalState,
    suite: SuiteRevision | None,
    now: datetime | None = None,
    *,
    unknown_agents: Sequence[str] = (),
) -> list[Outgoing]:
    """The events `state` is missing. A `requested` eval run is accepted when `suite` (the
    revision it asked for, or the latest) exists and no agent revision is unknown, refused
    otherwise; a running one starts planned case runs while fewer than `concurrency` are
    live, and completes once every planned case is graded. `now` is unused by the rules so
    far; the signature keeps the clock injected as the other deciders do."""
    del now
    if state.terminal:
        return []
    if state.status == EvalStatus.REQUESTED:
        return _accept(state, suite, unknown_agents)
    if state.planned and all(p.key in state.graded for p in state.planned):
        done = EvalCompleted(revisions=summaries(state), flipped=flipped(cells(state)))
        return [_message(state, done, "")]
    free = state.concurrency - len(state.live())
    out: list[Outgoing] = []
    for planned in state.planned:
        if free <= 0:
            break
        if planned.key not in state.started:
            out.append(started(state, planned))
            free -= 1
    return out


__all__ = [
    "CASE_RUN_ID_MAX",
    "FailReason",
    "SuiteRevision",
    "case_run_id",
    "case_run_of_reviewer",
    "decide",
    "plan",
    "refusal",
    "reviewer_run_id",
]
