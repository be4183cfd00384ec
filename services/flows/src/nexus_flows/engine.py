"""The engine loop: after each applied batch, decide for every touched flow run and publish
what is missing; ask core for the definitions of new flow runs; request the runs of applied
step starts (reconcile); fire due waits (timer loop).

Everything it publishes has a deterministic message id, and every decision is made from the
projection (what NEXUS_FLOWS recorded), so running it again after a crash or a restart
publishes nothing twice in effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import asyncpg
import nats.errors
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import FLOWS, RUNS
from nexus_events.errors import NexusError
from nexus_events.events import ApprovalDecided, FlowRequested, RunRequested
from nexus_events.events.flows import (
    FLOW_TERMINAL,
    FlowAccepted,
    FlowCancelled,
    FlowCompleted,
    FlowDefinition,
    FlowEvent,
    FlowFailed,
    FlowResumed,
    FlowStatus,
    FlowStepStarted,
    FlowWaiting,
    StepStatus,
)
from nexus_events.events.runs import Origin
from nexus_events.events.specs import RepoSpec
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.approvals import claim_approval
from nexus_events.transport.bus import Bus, decode_msg
from nexus_events.transport.fenced_projection import FencedProjectionRunner
from nexus_events.transport.projection import quote_ident
from nexus_events.transport.publish import Outgoing
from nexus_events.transport.run_requests import request_flow, run_request

from nexus_flows.accepting import Acceptance
from nexus_flows.decide import decide, run_input
from nexus_flows.messages import msg_id
from nexus_flows.metrics import FlowMetrics
from nexus_flows.records import FlowState, StepRecord
from nexus_flows.store import SCHEMA, FlowsProjection, load_state, load_states

log = logging.getLogger(__name__)


def generated_flow_run_id(event_id: str) -> str:
    """The id a ``nexus.flow.v1.new.requested`` gets: from its event id, so a redelivery
    re-publishes under the same id (and JetStream drops the repeat)."""
    return f"flow-{event_id}"[:128]


class FlowsRunner(FencedProjectionRunner):
    """The projection runner that wakes the engine after every applied batch; it commits
    only while its replica holds the flows lease (`fence`)."""

    def __init__(self, *args: Any, engine: Engine, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine = engine

    async def handle(self, feed: Any, batch: Any, delivered: int) -> None:
        flows: list[FlowsProjection] = []
        for p in self.projections:
            if isinstance(p, FlowsProjection):
                flows.append(p)
        for projection in flows:
            projection.take_touched()  # left by a batch that did not commit: not stored
        await super().handle(feed, batch, delivered)
        for projection in flows:
            self.engine.touch_states(projection.take_touched())
        for d in batch.events:
            if d.address.ids.get("flow_run_id") == subjects.NEW_RUN_TOKEN:
                self.engine.new_requests.append(d)
        self.engine.wake.set()


class Engine:
    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        *,
        schema: str = SCHEMA,
        timer_interval: float = 1.0,
        catalog_timeout: float = 5.0,
        catalog_retry: float = 2.0,
        metrics: FlowMetrics | None = None,
        concurrency: int = 16,
        clock: Clock | None = None,
    ) -> None:
        self.bus = bus
        # What "now" is for due waits, gate expiries and hand-off times (tests move it).
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or FlowMetrics()
        self.concurrency = concurrency
        self.pool = pool
        self.schema = schema
        self.q = quote_ident(schema)
        self.timer_interval = timer_interval
        self.acceptance = Acceptance(
            bus, timeout=catalog_timeout, retry=catalog_retry, concurrency=concurrency
        )
        self.wake = asyncio.Event()
        self.new_requests: list[Decoded] = []
        # Flow runs to decide for in the next pass, with the state the projection committed
        # (None: read the stored one).
        self._touched: dict[str, FlowState | None] = {}
        # Run ids this process has requested (or found requested in NEXUS_RUNS).
        self._requested: set[str] = set()
        # Flow runs live when this process started: their live steps' runs may have been
        # requested by an earlier process, so the stream is asked before requesting them.
        self._inherited: set[str] = set()
        self._definitions: dict[str, FlowDefinition] = {}
        # A pass at each wake and at least every timer interval; a failed pass (NATS or
        # PostgreSQL away) is logged and tried again after a pause; stop lets one finish.
        self._passes = PeriodicTask(
            self._pass,
            timer_interval,
            name="flows engine pass",
            first="after_interval",  # `start` sets `wake`: the first pass comes at once
            wake=self.wake,
            retry_after=min(timer_interval, 1.0),
            logger=log,
        )
        self._next_tick = 0.0  # loop time of the next timer pass
        self.errors = 0

    def touch(self, flow_run_ids: Iterable[str]) -> None:
        """Decide for these flow runs in the next pass, from their stored states."""
        for fid in flow_run_ids:
            self._touched.setdefault(fid, None)

    def touch_states(self, states: dict[str, FlowState]) -> None:
        """Decide for these flow runs in the next pass, from the states the projection has
        just committed (newer than any touched before): no read of them back."""
        self._touched.update(states)

    async def start(self) -> None:
        rows = await self.pool.fetch(
            f"SELECT flow_run_id FROM {self.q}.flow_runs WHERE status <> ALL($1::text[])",
            sorted(s.value for s in FLOW_TERMINAL),
        )
        live = {r["flow_run_id"] for r in rows}
        self._inherited |= live
        self.touch(live)
        # `new` requests are re-published under their generated id after the batch that
        # carried them; one that a crash interrupted is found here. Re-publishing one that
        # was done already is harmless: the fold keeps the first `requested` of an id.
        async for msg in self.bus.replay_raw(
            FLOWS, filter_subject=subjects.flow_event(subjects.NEW_RUN_TOKEN, FlowEvent.REQUESTED)
        ):
            with contextlib.suppress(NexusError):
                self.new_requests.append(decode_msg(msg))
        self.wake.set()
        self._next_tick = 0.0
        self._passes.start()

    async def stop(self) -> None:
        await self._passes.stop()

    async def _pass(self) -> None:
        """Republish new requests, step the touched flow runs and, once per timer interval,
        fire due timers and retry the catalog; a pass that fails touches its runs again."""
        loop = asyncio.get_running_loop()
        touched: dict[str, FlowState | None] = {}
        try:
            await self._republish_new()
            touched, self._touched = self._touched, {}
            await self._step_all(touched)
            if loop.time() >= self._next_tick:
                self._next_tick = loop.time() + self.timer_interval
                await self.fire_due(self.clock.now())
                await self._retry_catalog()
        except Exception:  # logged by the periodic task, which retries after a pause
            self.errors += 1
            self.touch(touched)
            raise

    async def _step_all(self, touched: dict[str, FlowState | None]) -> None:
        """Step every touched flow run, then publish what all of them need in one pipelined
        `publish_many`: one PostgreSQL read for the runs touched without a state, one catalog
        request per distinct definition asked for, one publish per pass (it was one of each
        per flow run, ~9 per three-step flow). A flow run whose decision fails is touched
        again for the next pass, the others go on; a failed publish fails the pass, which
        touches them all again (every message has a deterministic id)."""
        if not touched:
            return
        states = {fid: st for fid, st in touched.items() if st is not None}
        missing = [fid for fid, st in touched.items() if st is None]
        if missing:
            states.update(await load_states(self.pool, missing, self.schema))
        for fid in touched:
            found = states.get(fid)
            if found is None or found.terminal:
                self._inherited.discard(fid)
        live = [st for _, st in sorted(states.items()) if not st.terminal]
        failed: list[BaseException] = []
        out = await self.acceptance.accept_all(
            [st for st in live if st.definition is None], failed, self.touch
        )
        limit = asyncio.Semaphore(self.concurrency)
        handed: list[tuple[FlowState, StepRecord]] = []
        decided: list[str] = []

        async def one(state: FlowState) -> None:
            async with limit:
                try:
                    definition = self.definition(state)
                    actions = decide(state, definition, self.clock.now())
                    requests = await self._run_requests(state, definition)
                except Exception as exc:  # noqa: BLE001 - this one next pass, the others go on
                    self.touch([state.flow_run_id])
                    failed.append(exc)
                    return
                decided.append(state.flow_run_id)
                out.extend(actions)
                for rec, request in requests:
                    out.append(request)
                    handed.append((state, rec))

        await asyncio.gather(*(one(st) for st in live if st.definition is not None))
        if out:
            await self.bus.publish_many(out)
            self._count(out)
        for state, rec in handed:
            assert rec.run_id is not None  # `_run_requests` requests only steps with a run
            self._requested.add(rec.run_id)
            before = _finished_before(state, rec)
            if before is not None:
                self.metrics.handoff((self.clock.now() - before).total_seconds())
        self._inherited.difference_update(decided)  # their steps are requested now, once
        if failed:
            raise failed[0]

    # -- per flow run --------------------------------------------------------------------

    def _count(self, published: list[Outgoing]) -> None:
        for out in published:
            event = out.event
            if isinstance(event, FlowStepStarted) and event.item is None:
                self.metrics.step_started(event.kind)
            elif isinstance(event, FlowWaiting) and event.kind == "gate":
                self.metrics.gates(1)
            elif isinstance(event, FlowResumed) and event.by in ("approved", "denied", "expired"):
                self.metrics.gates(-1)
            elif isinstance(event, FlowCompleted | FlowFailed | FlowCancelled):
                self.metrics.finished(event.event_name)
            elif isinstance(event, FlowAccepted):
                self.metrics.started()

    def definition(self, state: FlowState) -> FlowDefinition:
        key = f"{state.flow}@{state.revision}"
        found = self._definitions.get(key)
        if found is None:
            found = FlowDefinition.model_validate(state.definition)
            self._definitions[key] = found
        return found

    async def _run_requests(
        self, state: FlowState, definition: FlowDefinition
    ) -> list[tuple[StepRecord, Outgoing]]:
        """The run request of every applied, unfinished run step not requested yet: once per
        process, and not at all when NEXUS_RUNS holds its request already (see
        `_stored_request`)."""
        inherited = state.flow_run_id in self._inherited
        out: list[tuple[StepRecord, Outgoing]] = []
        for rec in state.steps.values():
            run_id = rec.run_id
            if rec.kind not in ("run", "map") or not run_id or rec.status != StepStatus.RUNNING:
                if run_id:
                    self._requested.discard(run_id)  # finished: no need to remember it
                continue
            if run_id in self._requested:
                continue
            if inherited and await self._stored_request(run_id):
                self._requested.add(run_id)
                continue
            out.append((rec, self._run_request(state, definition, rec)))
        return out

    async def _stored_request(self, run_id: str) -> bool:
        """Whether NEXUS_RUNS holds a `requested` of `run_id`: one get of the subject's last
        message. A restart re-requests the live steps of the process before it, and
        JetStream drops a repeat of the message id only within its duplicate window (2 min
        by default); a restart after that would store a second request of the same run."""
        try:
            await self.bus.js.get_last_msg(RUNS, subjects.run_event(run_id, RunEvent.REQUESTED))
        except nats.js.errors.NotFoundError:
            return False
        return True

    def _run_request(
        self, state: FlowState, definition: FlowDefinition, rec: StepRecord
    ) -> Outgoing:
        spec = definition.step(rec.step)
        repo = getattr(spec, "repo", None) or carried_repo(state, definition, rec)
        labels = {
            "flow_run_id": state.flow_run_id,
            "flow": state.flow,
            "step": rec.step,
            "round": str(rec.round),
        }
        if rec.item is not None:
            labels["item"] = str(rec.item)
        request = RunRequested(
            agent_id=rec.agent_id,
            task_id=state.task_id,
            input=run_input(state, definition, rec),
            repo=repo,
            origin=Origin(state.origin),
            requested_by=state.requested_by or f"flow:{state.flow_run_id}",
            labels=labels,
            plan_mode=getattr(spec, "plan_mode", None),
            # The flow run's team, else the pinned definition's; None lets core take the
            # task's or the agent's (docs/spend.md, "Teams").
            team=state.team or definition.team,
        )
        run_id = rec.run_id
        assert run_id is not None  # `_run_requests` requests only steps with a run
        return run_request(run_id, request, source="flowrun")

    async def _retry_catalog(self) -> None:
        waiting = self.acceptance.waiting()
        self.touch(waiting)
        if waiting:
            self.wake.set()

    async def _republish_new(self) -> None:
        pending, self.new_requests = self.new_requests, []
        for d in pending:
            if not isinstance(d.event, FlowRequested):
                continue
            fid = generated_flow_run_id(d.envelope.event_id)
            if await load_state(self.pool, fid, self.schema) is not None:
                continue  # done before (found again by the start-up scan)
            await request_flow(
                self.bus,
                fid,
                d.event,
                source="flows",
                correlation_id=d.envelope.correlation_id or d.envelope.event_id,
                causation_id=d.envelope.event_id,
            )

    # -- due waits -----------------------------------------------------------------------

    async def fire_due(self, now: datetime) -> None:
        rows = await self.pool.fetch(
            f"""SELECT flow_run_id, step, round, wait_kind, approval_id, run_id
                FROM {self.q}.flow_steps
                WHERE status = $2 AND until IS NOT NULL AND until <= $1""",
            now,
            StepStatus.WAITING.value,
        )
        for r in rows:
            fid, step, round = r["flow_run_id"], r["step"], r["round"]
            kind = r["wait_kind"]
            if kind == "gate":
                await self._expire_gate(fid, step, round, r["run_id"], r["approval_id"])
                continue
            by = "timer" if kind == "timer" else "timeout"
            await self.bus.publish(
                subjects.flow_event(fid, FlowEvent.RESUMED),
                FlowResumed(step=step, round=round, by=by),
                msg_id=msg_id(fid, FlowEvent.RESUMED, step, round, None),
            )

    async def _expire_gate(
        self, fid: str, step: str, round: int, gate_run_id: str, approval_id: str
    ) -> None:
        # Claimed like any surface's answer, so a person answering now loses to the expiry
        # (or the expiry to them): one decision either way.
        claim = await claim_approval(
            self.bus.js, gate_run_id, approval_id, "expired", decided_by=None, surface="flows",
            token=f"flows-expiry-{approval_id}",
        )  # fmt: skip
        if not claim.won:
            return  # a person decided first: their inbox answer resumes the gate
        await publish_gate_decision(
            self.bus, fid=fid, step=step, round=round, gate_run_id=gate_run_id,
            approval_id=approval_id, decision="expired", decided_by=None, comment=None,
        )  # fmt: skip

    async def flow_status(self, flow_run_id: str) -> FlowStatus | None:
        state = await load_state(self.pool, flow_run_id, self.schema)
        return None if state is None else state.status


async def publish_gate_decision(
    bus: Bus,
    *,
    fid: str,
    step: str,
    round: int,
    gate_run_id: str,
    approval_id: str,
    decision: str,
    decided_by: str | None,
    comment: str | None,
    surface: str | None = None,
) -> None:
    """Record a gate's decision: `approval_decided` on the gate's run subject (what the
    approval surfaces read) and `resumed` on the flow (what the flow routes on)."""
    by = {"approve": "approved", "deny": "denied"}.get(decision, decision)
    await bus.publish_many(
        [
            Outgoing(
                subjects.run_event(gate_run_id, RunEvent.APPROVAL_DECIDED),
                ApprovalDecided(
                    approval_id=approval_id,
                    decision=by,
                    decided_by=decided_by,
                    comment=comment,
                    surface=surface,
                ),
                msg_id=f"flow:{gate_run_id}:approval_decided:{approval_id}",
            ),
            Outgoing(
                subjects.flow_event(fid, FlowEvent.RESUMED),
                FlowResumed(step=step, round=round, by=by, decided_by=decided_by, comment=comment),
                msg_id=msg_id(fid, FlowEvent.RESUMED, step, round, None),
            ),
        ]
    )


__all__ = ["Engine", "FlowsRunner", "generated_flow_run_id", "publish_gate_decision"]


def carried_repo(state: FlowState, definition: FlowDefinition, rec: StepRecord) -> RepoSpec | None:
    """The flow's repository, based on the branch of the last step before `rec` that left one:
    the implementer's branch is what the reviewer reads and the tester tests, and a next
    implementer round starts from the last one. Only steps started before `rec` count, so a
    repeated request for the same run is the same request."""
    base = state.repo or definition.repo
    if base is None:
        return None
    earlier = [
        r
        for r in state.steps.values()
        if r.item is None and r.n < rec.n and r.status == StepStatus.SUCCEEDED and r.branch
    ]
    if not earlier:
        return base
    last = max(earlier, key=lambda r: r.n)
    return base.model_copy(update={"ref": last.branch, "branch": None})


def _finished_before(state: FlowState, rec: StepRecord) -> datetime | None:
    """When the step before `rec` (in start order, outside maps) finished, if it has."""
    earlier = [r for r in state.steps.values() if r.item is None and r.n < rec.n]
    if rec.item is not None or not earlier:
        return None
    return max(earlier, key=lambda r: r.n).finished_at
