"""Asking the lab for an eval run and learning the id it picks; one line per eval-run event.

The request goes on ``nexus.eval.v1.new.requested`` (the lab picks the id, as the flows
service does for ``new``). Its event id is the CLI's own, and the lab names it as the cause
(or correlation) of the first event it publishes under the new id (`accepted`, or `failed`
for an unknown suite or revision), so the CLI reads NEXUS_EVALS, from before it publishes,
until that event shows the id.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import nats.errors
from nats.js.api import DeliverPolicy
from nexus_events.contract import subjects
from nexus_events.contract.streams import EVALS
from nexus_events.errors import DecodeError
from nexus_events.events import (
    EvalAccepted,
    EvalCaseGraded,
    EvalCaseStarted,
    EvalCompleted,
    EvalFailed,
    EvalRequested,
)
from nexus_events.events.base import Event
from nexus_events.events.evals import EvalEvent
from nexus_events.transport.bus import decode_msg

from nexus_cli.client import Session
from nexus_cli.errors import CliError, ExitCode

# Seconds one wait for the next eval event lasts before the deadline is checked again.
_POLL = 0.5


def new_request_id() -> str:
    """The request's event id (``Nats-Msg-Id``): unique, so asking twice runs twice."""
    return f"cli-eval-{uuid.uuid4().hex}"


async def await_eval_run_id(s: Session, request: EvalRequested, *, within: float) -> str:
    """Publish `request` and return the eval run id the lab gives it; exit 5 when the lab
    has not taken it up within `within` seconds (the request stays stored for when it does)."""
    request_id = new_request_id()
    sub = await s.bus.js.subscribe(
        subjects.eval_events_filter(),
        stream=EVALS,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.NEW,
    )
    try:
        await s.publish_guarded(
            s.bus.publish(
                subjects.eval_event(subjects.NEW_RUN_TOKEN, EvalEvent.REQUESTED),
                request,
                msg_id=request_id,
                correlation_id=request_id,
            )
        )
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=min(left, _POLL))
            except nats.errors.TimeoutError:
                continue
            try:
                d = decode_msg(msg)
            except DecodeError:
                continue  # dead-lettered by the lab; not ours to judge
            eval_run_id = d.address.ids.get("eval_run_id")
            caused = request_id in (d.envelope.causation_id, d.envelope.correlation_id)
            if caused and eval_run_id and eval_run_id != subjects.NEW_RUN_TOKEN:
                return eval_run_id
    finally:
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    raise CliError(
        f"the eval request was stored but the lab did not take it up within {within:.1f}s",
        hint="is the lab running? `nexus dev status`; `nexus eval ls-runs` lists it once it is",
        code=ExitCode.TIMEOUT,
    )


def _case(event: EvalCaseStarted | EvalCaseGraded) -> str:
    where = f"case {event.case} {event.agent_id}@{event.revision} trial {event.trial}"
    if isinstance(event, EvalCaseStarted):
        return f"{where} started: run {event.run_id}"
    verdict = "pass" if event.passed else "FAIL"
    why = "; ".join(f"{g.grader}: {g.reason}" for g in event.grades if not g.passed)
    return f"{where} {verdict} ({event.status}){f': {why}' if why else ''}"


def _start(event: EvalRequested | EvalAccepted) -> str:
    if isinstance(event, EvalRequested):
        trials = f" x {event.trials} trials" if event.trials else ""
        by = f" by {event.requested_by}" if event.requested_by else ""
        return f"requested: suite {event.suite} for {', '.join(event.agents)}{trials}{by}"
    labels = ", ".join(r.label() for r in event.revisions)
    planned = len(event.cases) * len(event.revisions) * event.trials
    return (
        f"accepted: suite {event.suite}@{event.suite_revision}, {len(event.cases)} cases"
        f" x {labels} x {event.trials} trials ({planned} case runs,"
        f" {event.concurrency} at once)"
    )


def _end(event: EvalCompleted | EvalFailed) -> str:
    if isinstance(event, EvalFailed):
        return f"failed ({event.reason}): {event.message}"
    rates = ", ".join(f"{r.agent_id}@{r.revision} {r.passed}/{r.graded}" for r in event.revisions)
    return f"completed: {rates}"


def describe_eval_event(name: EvalEvent, event: Event) -> str:
    """One line for people per eval-run event."""
    if isinstance(event, EvalCaseStarted | EvalCaseGraded):
        return _case(event)
    if isinstance(event, EvalRequested | EvalAccepted):
        return _start(event)
    if isinstance(event, EvalCompleted | EvalFailed):
        return _end(event)
    return str(name)
