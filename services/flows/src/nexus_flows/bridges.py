"""What the flows service reads besides NEXUS_FLOWS, turned into flow events:

- runs (NEXUS_RUNS terminal events): the run of a step ended -> `step_finished`, with the
  run's `result.details` as output once it fits the step's `output_schema`;
- gate answers (NEXUS_INBOX `approval_decision` on a gate's run id) -> `approval_decided`
  and `resumed`;
- webhooks (NEXUS_CHANNELS ``nexus.channel.v1.<source>.webhook``) matching an event wait
  -> a `signal` on the flow run.

Each is a durable consumer; messages that are not about a flow are acked and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Literal

import asyncpg
import jsonschema
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import decode
from nexus_events.contract.expressions import ExpressionError, compile_expression
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent
from nexus_events.contract.streams import CHANNELS, INBOX, RUNS
from nexus_events.errors import NexusError
from nexus_events.events import ApprovalDecision, WebhookReceived
from nexus_events.events.flows import (
    FLOW_TERMINAL,
    STEP_ENDED,
    FlowEvent,
    FlowReason,
    FlowSignal,
    FlowStepFinished,
    RunStep,
    StepStatus,
)
from nexus_events.events.runs import RunCancelled, RunCompleted, RunPrepared, TerminalEvent
from nexus_events.transport.bus import Bus, ConsumerSpec, Delivery
from nexus_events.transport.projection import quote_ident
from nexus_events.transport.publish import Outgoing

from nexus_flows.engine import Engine, publish_gate_decision
from nexus_flows.records import FlowState
from nexus_flows.state import step_key
from nexus_flows.store import NO_ITEM, SCHEMA, load_state

log = logging.getLogger(__name__)


def runs_spec(prefix: str, fetch_timeout: float) -> ConsumerSpec:
    return ConsumerSpec(
        stream=RUNS,
        durable=f"{prefix}_runs",
        filter_subjects=tuple(subjects.run_events_filter(None, e) for e in TERMINAL_EVENTS),
        fetch_timeout=fetch_timeout,
    )


def inbox_spec(prefix: str, fetch_timeout: float) -> ConsumerSpec:
    return ConsumerSpec(
        stream=INBOX,
        durable=f"{prefix}_inbox",
        filter_subjects=(subjects.family_filter(subjects.Family.INBOX),),
        fetch_timeout=fetch_timeout,
    )


def webhooks_spec(prefix: str, fetch_timeout: float) -> ConsumerSpec:
    return ConsumerSpec(
        stream=CHANNELS,
        durable=f"{prefix}_webhooks",
        filter_subjects=(subjects.channel_events_filter(None, "webhook"),),
        fetch_timeout=fetch_timeout,
    )


def output_error(schema: dict[str, Any] | None, details: dict[str, Any]) -> str | None:
    """Why `details` do not fit `schema` (None: they fit, or there is no schema)."""
    if not schema:
        return None
    try:
        jsonschema.validate(details, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(details)"
        return f"{where}: {exc.message}"
    except jsonschema.SchemaError as exc:
        return f"the output_schema is not a valid JSON Schema: {exc.message}"
    return None


class Bridges:
    def __init__(self, bus: Bus, pool: asyncpg.Pool[Any], engine: Engine, schema: str = SCHEMA):
        self.bus = bus
        self.pool = pool
        self.engine = engine
        self.schema = schema
        self.q = quote_ident(schema)

    # -- runs ------------------------------------------------------------------------------

    async def on_runs(self, batch: list[Delivery]) -> None:
        """The `step_finished` of every flow step whose run ended in the batch: one query for
        the steps and their flow runs' states, the agents' schemas read concurrently, one
        pipelined publish (it was a query, a read and a publish per run, one after another).
        """
        ended: dict[str, TerminalEvent] = {}
        for d in batch:
            event = d.event
            run_id = d.address.ids.get("run_id")
            if isinstance(event, TerminalEvent) and run_id is not None:
                ended.setdefault(run_id, event)  # a repeat has the same message id anyway
        if not ended:
            return
        rows = await self.pool.fetch(
            f"""SELECT s.run_id, s.step, s.round, s.item, r.state
                FROM {self.q}.flow_steps s JOIN {self.q}.flow_runs r USING (flow_run_id)
                WHERE s.run_id = ANY($1::text[]) AND s.kind IN ('run', 'map')""",
            list(ended),
        )
        finishing = [(row, ended[row["run_id"]]) for row in rows]  # the others: not a flow's
        out = await asyncio.gather(*(self._finish(row, event) for row, event in finishing))
        await self.bus.publish_many([o for o in out if o is not None])

    async def _finish(self, row: Any, event: TerminalEvent) -> Outgoing | None:
        run_id, step, round = row["run_id"], row["step"], row["round"]
        item = None if row["item"] == NO_ITEM else row["item"]
        state = FlowState.load(row["state"])
        fid = state.flow_run_id
        rec = state.steps.get(step_key(step, round, item))
        if rec is None or rec.status in STEP_ENDED:
            return None
        status: Literal[StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.CANCELLED] = (
            StepStatus.SUCCEEDED
        )
        reason = event.reason
        message = event.message
        output: dict[str, Any] = {}
        summary, branch = "", None
        if isinstance(event, RunCompleted):
            output = dict(event.result.details)
            # Only a pushed branch exists in the repository the next step clones: a run that
            # committed nothing (a planner, a reviewer) still reports its workspace branch.
            pushed = event.result.branch if event.result.pushed else None
            summary, branch = event.result.summary, pushed
            spec = self.engine.definition(state).step(step)
            step_schema = spec.output_schema if isinstance(spec, RunStep) else None
            for whose, schema in (
                ("step's", step_schema),
                ("agent's", await self._agent_schema(run_id)),
            ):
                problem = output_error(schema, output)
                if problem is not None:
                    status, reason = StepStatus.FAILED, FlowReason.INVALID_OUTPUT
                    message = (
                        f"run {run_id} output does not fit the {whose} output_schema: {problem}"
                    )
                    break
        else:
            cancelled = isinstance(event, RunCancelled)
            status = StepStatus.CANCELLED if cancelled else StepStatus.FAILED
        finished = FlowStepFinished(
            step=step,
            round=round,
            item=item,
            status=status,
            reason=reason,
            message=message,
            run_id=run_id,
            output=output,
            summary=summary,
            branch=branch,
        )
        return Outgoing(
            subjects.flow_event(fid, FlowEvent.STEP_FINISHED),
            finished,
            msg_id=f"flow:{run_id}:finished",
        )

    async def _agent_schema(self, run_id: str) -> dict[str, Any] | None:
        """The agent's output_schema as core assembled it into the run (`prepared`): one
        direct get of the subject's last message, not a consumer per run."""
        try:
            subject = subjects.run_event(run_id, RunEvent.PREPARED)
            raw = await self.bus.js.get_last_msg(RUNS, subject)
        except nats.js.errors.NotFoundError:
            return None
        with contextlib.suppress(NexusError):
            prepared = decode(raw.subject or "", raw.data or b"", dict(raw.headers or {})).event
            if isinstance(prepared, RunPrepared):
                return prepared.config.output_schema
        return None

    # -- gate answers ----------------------------------------------------------------------

    async def on_inbox(self, batch: list[Delivery]) -> None:
        for d in batch:
            event = d.event
            gate_run_id = d.address.ids.get("run_id")
            if not isinstance(event, ApprovalDecision) or gate_run_id is None:
                continue
            row = await self.pool.fetchrow(
                f"""SELECT s.flow_run_id, s.step, s.round, s.status, s.approval_id,
                        r.status AS flow_status
                    FROM {self.q}.flow_steps s JOIN {self.q}.flow_runs r USING (flow_run_id)
                    WHERE s.run_id = $1 AND s.kind = 'gate'""",
                gate_run_id,
            )
            if row is None or row["flow_status"] in FLOW_TERMINAL:
                continue  # not a flow's gate, or its flow has ended
            if row["status"] != StepStatus.WAITING:
                if row["status"] == StepStatus.RUNNING:
                    d.retry(0.5)  # the gate's `waiting` is not applied yet
                continue  # decided already: the first decision won
            if row["approval_id"] != event.approval_id:
                continue
            await publish_gate_decision(
                self.bus,
                fid=row["flow_run_id"],
                step=row["step"],
                round=row["round"],
                gate_run_id=gate_run_id,
                approval_id=event.approval_id,
                decision=event.decision,
                decided_by=event.decided_by,
                comment=event.comment,
                surface=event.surface,
            )

    # -- webhooks --------------------------------------------------------------------------

    async def on_webhooks(self, batch: list[Delivery]) -> None:
        for d in batch:
            event = d.event
            if not isinstance(event, WebhookReceived):
                continue
            rows = await self.pool.fetch(
                f"SELECT flow_run_id, step, round FROM {self.q}.flow_steps"
                " WHERE status = $2 AND wait_kind = 'event' AND wait_source = $1",
                event.source,
                StepStatus.WAITING.value,
            )
            for row in rows:
                await self._match(row, event)

    async def _match(self, row: Any, event: WebhookReceived) -> None:
        fid = row["flow_run_id"]
        state = await load_state(self.pool, fid, self.schema)
        if state is None:
            return
        rec = state.steps.get(step_key(row["step"], row["round"]))
        if rec is None or rec.waiting is None:
            return
        correlation_id = rec.waiting.correlation_id
        spec = self.engine.definition(state).step(row["step"])
        wait_event = getattr(spec, "event", None)
        if wait_event is None:
            return
        ctx = {"source": event.source, "kind": event.kind or "", "payload": event.payload}
        try:
            key = compile_expression(wait_event.key).evaluate(ctx)
            if str(key) != correlation_id:
                return
            if wait_event.when is not None and not compile_expression(wait_event.when).test(ctx):
                return
        except ExpressionError:
            return  # this webhook does not have what the wait looks at: not a match
        signal = FlowSignal(
            correlation_id=correlation_id or "",
            payload=event.payload,
            sent_by=f"webhook:{event.source}",
        )
        await self.bus.publish_many(
            [
                Outgoing(
                    subjects.flow_event(fid, FlowEvent.SIGNAL),
                    signal,
                    msg_id=f"flow:{fid}:signal:webhook:{event.delivery_id}",
                )
            ]
        )


__all__ = ["Bridges", "inbox_spec", "output_error", "runs_spec", "webhooks_spec"]
