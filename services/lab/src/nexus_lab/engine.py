"""The lab's engine: after each applied batch, decide for every touched eval run and publish
what is missing; resolve new eval runs against the suites and core's catalog; request the
case runs of applied `case_started` events; grade case runs that ended.

Every decision is made from the projection (what NEXUS_EVALS recorded) and everything it
publishes has a deterministic message id, so running it again after a crash or a restart
publishes nothing twice in effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import CATALOG, EVALS, RUNS
from nexus_events.errors import NexusError
from nexus_events.events.evals import (
    AgentRevision,
    EvalCaseGraded,
    EvalEvent,
    EvalRequested,
    EvalStatus,
)
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.bus import Bus, decode_msg
from nexus_events.transport.fenced_projection import FencedProjectionRunner
from nexus_events.transport.follow import Batch, Feed
from nexus_events.transport.projection import quote_ident, read_checkpoint
from nexus_events.transport.publish import Outgoing

from nexus_lab.case_runs import (
    NotGoldenError,
    case_request,
    case_source,
    grade_case,
    graded_message,
    refused_event,
)
from nexus_lab.core_client import CoreClient, CoreUnavailableError
from nexus_lab.decide import SuiteRevision, decide
from nexus_lab.metrics import LabMetrics
from nexus_lab.state import TERMINAL, EvalState
from nexus_lab.store import SCHEMA, load_state, load_suite

log = logging.getLogger(__name__)


def generated_eval_run_id(event_id: str) -> str:
    """The id a ``nexus.eval.v1.new.requested`` gets: from its event id, so a redelivery
    re-publishes under the same id (and JetStream drops the repeat)."""
    return f"eval-{event_id}"[:128]


class LabRunner(FencedProjectionRunner):
    """The projection runner that wakes the engine after every applied batch; it commits
    only while its replica holds the lab lease (`fence`)."""

    def __init__(self, *args: Any, engine: Engine, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine = engine

    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        await super().handle(feed, batch, delivered)
        # Committed: the engine reads what this batch wrote. Taken from the batch itself, as
        # NEXUS_CATALOG and NEXUS_EVALS are followed concurrently (a set the projection
        # filled was once taken by the other feed before its transaction committed, and the
        # engine, finding no row yet, never looked at that eval run again).
        touched: set[str] = set()
        for d in batch.events:
            eid = d.address.ids.get("eval_run_id")
            if eid == subjects.NEW_RUN_TOKEN:
                self.engine.new_requests.append(d)
            elif eid is not None:
                touched.add(eid)
        self.engine.touch(touched)
        self.engine.wake.set()


class Engine:
    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        *,
        schema: str = SCHEMA,
        interval: float = 1.0,
        query_timeout: float = 5.0,
        metrics: LabMetrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.bus = bus
        self.pool = pool
        self.schema = schema
        self.q = quote_ident(schema)
        self.core = CoreClient(bus.nc, query_timeout)
        self.metrics = metrics or LabMetrics()
        self.clock: Clock = clock or SystemClock()
        self.wake = asyncio.Event()
        self.new_requests: list[Decoded] = []
        self._touched: set[str] = set()
        # Case runs this process requested (or found requested in NEXUS_RUNS).
        self._requested: set[str] = set()
        # Case runs that ended (their terminal event, or a reviewer's) and are not graded.
        self._ended: set[str] = set()
        # Eval runs live when this process started: their case runs may have been requested,
        # or have ended, under an earlier process; each is checked once.
        self._inherited: set[str] = set()
        # A pass at each wake and at least every interval: what waits on core (a run's view
        # behind its terminal event, core away) is tried again on the interval.
        self._passes = PeriodicTask(
            self._pass,
            interval,
            name="lab engine pass",
            first="after_interval",
            wake=self.wake,
            retry_after=min(interval, 1.0),
            # A pass may be waiting on core for many case runs' views: on stop it gets a
            # moment, then is cut. That is safe: every event it publishes has a derived id and
            # a case run is requested only after its case_started is stored, so the next
            # leader's pass redoes what was cut, once (a full run saw a 60 s stop without it).
            stop_grace=2.0,
            logger=log,
        )
        self._waiting: set[str] = set()  # eval runs with something to try again

    def touch(self, eval_run_ids: set[str]) -> None:
        self._touched |= eval_run_ids

    def ended(self, case_run_id: str, eval_run_id: str) -> None:
        """A case run (or one of its reviewers) ended: grade it at the next pass."""
        self._ended.add(case_run_id)
        self._touched.add(eval_run_id)
        self.wake.set()

    async def start(self) -> None:
        rows = await self.pool.fetch(
            f"SELECT eval_run_id FROM {self.q}.eval_runs WHERE status <> ALL($1::text[])",
            sorted(TERMINAL),
        )
        live = {r["eval_run_id"] for r in rows}
        self._inherited |= live
        self.touch(live)
        async for msg in self.bus.replay_raw(
            EVALS, filter_subject=subjects.eval_event(subjects.NEW_RUN_TOKEN, EvalEvent.REQUESTED)
        ):
            with contextlib.suppress(NexusError):
                self.new_requests.append(decode_msg(msg))
        self.wake.set()
        self._passes.start()

    async def stop(self) -> None:
        await self._passes.stop()

    async def _pass(self) -> None:
        await self._republish_new()
        touched, self._touched = self._touched | self._waiting, set()
        self._waiting = set()
        failed: BaseException | None = None
        for eid in sorted(touched):
            try:
                await self.step(eid)
            except CoreUnavailableError as exc:
                log.info("eval run %s waits for core: %s", eid, exc)
                self._waiting.add(eid)
            except Exception as exc:  # noqa: BLE001 - this one next pass, the others go on
                self._waiting.add(eid)
                failed = exc
        if failed is not None:
            raise failed

    # -- per eval run --------------------------------------------------------------------

    async def step(self, eval_run_id: str) -> None:
        state = await load_state(self.pool, eval_run_id, self.schema)
        if state is None or state.terminal:
            self._inherited.discard(eval_run_id)
            return
        if state.status == EvalStatus.REQUESTED:
            await self._accept(state)
            return
        suite = await load_suite(self.pool, state.suite, state.suite_revision, self.schema)
        if suite is None:  # its pinned revision is in the projection: only a lost table
            raise RuntimeError(f"eval run {eval_run_id}: suite {state.suite} revision gone")
        inherited = eval_run_id in self._inherited
        progressed = await self._grade(state, suite, inherited)
        if progressed:
            return  # the grades come back through the projection, which touches it again
        await self._publish(decide(state, suite, self.clock.now()))
        await self._reconcile(state, suite, inherited)
        self._inherited.discard(eval_run_id)

    async def _publish(self, out: list[Outgoing]) -> None:
        if not out:
            return
        await self.bus.publish_many(out)
        self.metrics.count(out)

    async def _accept(self, state: EvalState) -> None:
        if await self._suite_in_flight(state):
            self._waiting.add(state.eval_run_id)
            return  # applied or deleted but not projected yet: decide on the next pass
        suite = await load_suite(self.pool, state.suite, state.requested_revision, self.schema)
        unknown: list[str] = []
        if suite is not None:
            for text in state.agents:
                if not await self.core.agent_exists(AgentRevision.parse(text)):
                    unknown.append(text)
        await self._publish(decide(state, suite, self.clock.now(), unknown_agents=unknown))

    async def _suite_in_flight(self, state: EvalState) -> bool:
        """Whether NEXUS_CATALOG holds an apply or delete of the suite the projection has not
        folded yet: an eval run asked right after its suite changed runs what was asked for,
        not the revision before (nor is it refused for a suite not yet seen)."""
        newest = 0
        for what in ("applied", "deleted"):
            subject = subjects.catalog_event(subjects.CatalogKind.EVAL, state.suite, what)
            try:
                msg = await self.bus.js.get_last_msg(CATALOG, subject)
            except nats.js.errors.NotFoundError:
                continue
            newest = max(newest, msg.seq or 0)
        if newest == 0:
            return False
        async with self.pool.acquire() as conn:
            folded = await read_checkpoint(conn, self.schema, CATALOG)
        return newest > folded

    async def _grade(self, state: EvalState, suite: SuiteRevision, inherited: bool) -> bool:
        """Grade the live case runs that ended (every live one of an inherited eval run is
        looked at once); True when something was published."""
        out: list[Outgoing] = []
        for key in state.live():
            run_id = state.started[key]
            if not inherited and run_id not in self._ended:
                continue
            planned = state.planned_case(key)
            if planned is None:
                continue
            grading = await grade_case(self.core, state, suite.suite, planned, run_id)
            out.extend(grading.reviews)
            if grading.graded is not None:
                out.append(graded_message(state, planned, grading.graded))
                self._ended.discard(run_id)
            elif run_id in self._ended:
                self._waiting.add(state.eval_run_id)  # core's view is behind: again later
        await self._publish(out)
        return any(isinstance(o.event, EvalCaseGraded) for o in out)

    async def _reconcile(self, state: EvalState, suite: SuiteRevision, inherited: bool) -> None:
        """Request the run of every applied, ungraded case start: once per process, and not
        at all when NEXUS_RUNS holds its request already (an earlier process asked)."""
        # A graded case run needs no remembering: its eval run will not ask for it again.
        self._requested.difference_update(g.run_id for g in state.graded.values())
        out: list[Outgoing] = []
        asked: list[str] = []
        for key in state.live():
            run_id = state.started[key]
            planned = state.planned_case(key)
            if run_id in self._requested or planned is None:
                continue
            if inherited and await self._stored_request(run_id):
                self._requested.add(run_id)
                continue
            case = next(c for c in suite.suite.cases if c.id == planned.case)
            try:
                source = await case_source(self.core, case)
            except NotGoldenError as exc:
                refused = refused_event(planned, run_id, str(exc))
                out.append(graded_message(state, planned, refused))
                continue
            out.append(case_request(state, planned, run_id, source))
            asked.append(run_id)
        await self._publish(out)
        self._requested.update(asked)

    async def _stored_request(self, run_id: str) -> bool:
        try:
            await self.bus.js.get_last_msg(RUNS, subjects.run_event(run_id, RunEvent.REQUESTED))
        except nats.js.errors.NotFoundError:
            return False
        return True

    async def _republish_new(self) -> None:
        pending, self.new_requests = self.new_requests, []
        for d in pending:
            if not isinstance(d.event, EvalRequested):
                continue
            eid = generated_eval_run_id(d.envelope.event_id)
            if await load_state(self.pool, eid, self.schema) is not None:
                continue
            await self.bus.publish(
                subjects.eval_event(eid, EvalEvent.REQUESTED),
                d.event,
                msg_id=f"lab:{eid}:requested",
                correlation_id=d.envelope.correlation_id or d.envelope.event_id,
                causation_id=d.envelope.event_id,
            )


__all__ = ["Engine", "LabRunner", "generated_eval_run_id"]
