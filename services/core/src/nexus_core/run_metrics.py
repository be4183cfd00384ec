"""The system's run metrics, derived in one place (core) from the event stream.

`RunMetrics` follows NEXUS_RUNS with its own durable consumer (like a projection, but into
instruments instead of tables) and records runs by state and reason, run duration and queue
wait from the JetStream timestamps, tokens and cost by agent and model, tool calls by tool
and outcome, and resumes (by reason, with their latency) and condensations by strategy. It
also polls the pipeline: pending and ack-pending messages of every durable
consumer on the Nexus streams, the size of NEXUS_DLQ, and the lag of every projection
(stream last sequence minus the checkpoint stored in PostgreSQL).

Because the numbers come from the stream, one replica anywhere gives the system's metrics:
core hosts them, the other services need not count runs themselves, and a restart resumes from
the durable consumer's position instead of double counting.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import nats.errors
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import DLQ, RUNS, STREAM_OF_FAMILY
from nexus_events.events.base import Event
from nexus_events.events.runs import (
    Reason,
    RunCondensed,
    RunDispatched,
    RunPrepared,
    RunRequested,
    RunResumed,
    RunResuming,
    RunStarted,
    RunTurn,
    TerminalEvent,
    ToolCalled,
    ToolResult,
)
from nexus_events.runtime.metrics import METER_NAME, MetricsSettings
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.bus import Bus, Consumer, ConsumerSpec, Delivery
from nexus_events.transport.follow import StreamFollower
from nexus_events.transport.projection import CHECKPOINT_TABLE
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from pydantic import Field
from pydantic_settings import SettingsConfigDict

log = logging.getLogger(__name__)

# Runs whose timestamps are remembered until their terminal event. A run that never ends
# (lost without a `lost` event) would otherwise stay forever; past this the oldest is dropped.
MAX_TRACKED_RUNS = 100_000
# Histogram buckets in seconds: runs take seconds to hours; queue waits milliseconds to hours.
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
TOOL_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)
# Resume latency (the dead runner's last sign of life to the new attempt's restore): dominated
# by heartbeat detection and the runtime's start-up, seconds to minutes.
RESUME_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)

# The OTel names of every instrument, one place for docs, dashboards and their test.
RUNS_COUNTER = "nexus.runs"
RUN_DURATION = "nexus.run.duration"
RUN_QUEUE_WAIT = "nexus.run.queue_wait"
RUN_START_LATENCY = "nexus.run.start_latency"
LLM_TOKENS = "nexus.llm.tokens"
LLM_COST = "nexus.llm.cost_usd"
LLM_TURNS = "nexus.llm.turns"
TOOL_CALLS = "nexus.tool.calls"
TOOL_DURATION = "nexus.tool.duration"
RUN_RESUMES = "nexus.run.resumes"
RUN_RESUME_LATENCY = "nexus.run.resume_latency"
RUN_CONDENSATIONS = "nexus.run.condensations"
CONSUMER_PENDING = "nexus.consumer.pending"
CONSUMER_ACK_PENDING = "nexus.consumer.ack_pending"
DLQ_MESSAGES = "nexus.dlq.messages"
PROJECTION_LAG = "nexus.projection.lag"
PROJECTION_RESTARTS = "nexus.projection.restarts"
PROJECTION_STUCK = "nexus.projection.stuck"
CANARY_DECISIONS = "nexus.canary.decisions"
INSTRUMENTS = (
    RUNS_COUNTER,
    RUN_DURATION,
    RUN_QUEUE_WAIT,
    RUN_START_LATENCY,
    LLM_TOKENS,
    LLM_COST,
    LLM_TURNS,
    TOOL_CALLS,
    TOOL_DURATION,
    RUN_RESUMES,
    RUN_RESUME_LATENCY,
    RUN_CONDENSATIONS,
    CONSUMER_PENDING,
    CONSUMER_ACK_PENDING,
    DLQ_MESSAGES,
    PROJECTION_LAG,
    PROJECTION_RESTARTS,
    PROJECTION_STUCK,
    CANARY_DECISIONS,
)


class RunMetricsSettings(MetricsSettings):
    """Export (`MetricsSettings`) plus how core follows the stream for the system's metrics."""

    model_config = SettingsConfigDict(env_prefix="NEXUS_METRICS_", extra="ignore")

    enabled: bool = Field(True, description="Core follows NEXUS_RUNS and polls the pipeline.")
    durable: str = Field(
        "metrics", pattern=r"^[A-Za-z0-9_-]+$", description="Durable consumer on NEXUS_RUNS."
    )
    poll_interval: float = Field(15.0, gt=0, description="Seconds between pipeline polls.")


@dataclass(slots=True)
class _RunTimes:
    """What is known of a live run: its agent and when (JetStream time, ns) it reached a step."""

    agent_id: str = "unknown"
    requested_ns: int | None = None
    dispatched_ns: int | None = None
    started_ns: int | None = None
    refused_calls: set[str] = field(default_factory=set)
    # The attempt starting woke from a sleep: not a resume after a loss, and its `resumed`
    # latency is the sleep, not a recovery time (docs/resume.md, Sleep).
    woke: bool = False


@dataclass
class PipelineSnapshot:
    """The last polled state of the pipeline (what the observable gauges report)."""

    consumers: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    dlq: dict[str, int] = field(default_factory=dict)
    projections: dict[tuple[str, str], int] = field(default_factory=dict)
    # Per stream follower of this process (its name): (restarts, stuck).
    followers: dict[str, tuple[int, bool]] = field(default_factory=dict)


def _seconds(start_ns: int | None, end_ns: int | None) -> float | None:
    if start_ns is None or end_ns is None or end_ns < start_ns:
        return None
    return (end_ns - start_ns) / 1e9


class RunMetrics:
    """Records the system's metrics from NEXUS_RUNS and polls the pipeline gauges.

    `observe` is the whole event-to-metric mapping (feed it decoded events directly, e.g. in
    tests); `start` follows NEXUS_RUNS with the durable consumer `settings.durable` and polls
    every `settings.poll_interval` seconds; `stop` drains both. `pool` (optional) is a
    PostgreSQL pool whose databases' ``projection_checkpoint`` tables give projection lag.
    """

    def __init__(
        self,
        bus: Bus,
        meter_provider: MeterProvider,
        *,
        pool: asyncpg.Pool[Any] | None = None,
        settings: RunMetricsSettings | None = None,
        followers: Sequence[StreamFollower] = (),
    ) -> None:
        self.bus = bus
        self.pool = pool
        self.followers = tuple(followers)
        self.settings = settings or RunMetricsSettings()
        self.snapshot = PipelineSnapshot()
        self._runs: OrderedDict[str, _RunTimes] = OrderedDict()
        self._consumer: Consumer | None = None
        self._poller = PeriodicTask(
            self.poll_once,
            self.settings.poll_interval,
            name="metrics poll",
            quiet=(nats.errors.Error, nats.js.errors.Error, asyncpg.PostgresError, OSError),
            logger=log,
        )
        self._instruments(meter_provider.get_meter(METER_NAME))

    def _instruments(self, meter: Meter) -> None:
        self._runs_counter = meter.create_counter(
            RUNS_COUNTER, unit="{run}", description="Run lifecycle events by state and reason."
        )
        self._duration = meter.create_histogram(
            RUN_DURATION,
            unit="s",
            description="Requested to terminal, by agent and terminal state.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._queue_wait = meter.create_histogram(
            RUN_QUEUE_WAIT,
            unit="s",
            description="Requested to dispatched (assembly and admission), by agent.",
            explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
        )
        self._start_latency = meter.create_histogram(
            RUN_START_LATENCY,
            unit="s",
            description="Dispatched to started (runtime start-up), by agent.",
            explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
        )
        self._tokens = meter.create_counter(
            LLM_TOKENS, unit="{token}", description="LLM tokens by agent, model and direction."
        )
        self._cost = meter.create_counter(
            LLM_COST, unit="{USD}", description="LLM cost in USD by agent and model."
        )
        self._turns = meter.create_counter(
            LLM_TURNS, unit="{turn}", description="LLM turns by agent and model."
        )
        self._tool_calls = meter.create_counter(
            TOOL_CALLS, unit="{call}", description="Tool calls by agent, tool and outcome."
        )
        self._tool_duration = meter.create_histogram(
            TOOL_DURATION,
            unit="s",
            description="Tool run time by tool.",
            explicit_bucket_boundaries_advisory=TOOL_BUCKETS,
        )
        self._resumes = meter.create_counter(
            RUN_RESUMES,
            unit="{attempt}",
            description="Attempts started after a runner loss, by agent and the reason.",
        )
        self._resume_latency = meter.create_histogram(
            RUN_RESUME_LATENCY,
            unit="s",
            description="The dead attempt's last sign of life to the new one restored, by agent.",
            explicit_bucket_boundaries_advisory=RESUME_BUCKETS,
        )
        self._condensations = meter.create_counter(
            RUN_CONDENSATIONS,
            unit="{condensation}",
            description="Conversations condensed to fit the context budget, by agent and strategy.",
        )
        self._canary_decisions = meter.create_counter(
            CANARY_DECISIONS,
            unit="{decision}",
            description="Canary decisions core made, by agent and decision (promote, rollback).",
        )
        gauges = (
            (CONSUMER_PENDING, self._observe_pending, "{message}",
             "Messages not yet delivered to a durable consumer."),
            (CONSUMER_ACK_PENDING, self._observe_ack_pending, "{message}",
             "Messages delivered to a durable consumer but not acknowledged."),
            (DLQ_MESSAGES, self._observe_dlq, "{message}",
             "Dead letters in NEXUS_DLQ by service."),
            (PROJECTION_LAG, self._observe_projection_lag, "{event}",
             "Stream last sequence minus the projection's checkpoint."),
            (PROJECTION_RESTARTS, self._observe_restarts, "{restart}",
             "Times a projection restarted from its checkpoint after an error."),
            (PROJECTION_STUCK, self._observe_stuck, "1",
             "1 while a projection keeps failing without applying anything."),
        )  # fmt: skip
        for name, callback, unit, description in gauges:
            meter.create_observable_gauge(
                name, callbacks=[callback], unit=unit, description=description
            )

    # -- events -> metrics -------------------------------------------------------------

    def canary_decided(self, agent_id: str, decision: str) -> None:
        """Count a canary decision core published (nexus_core.canary_runner)."""
        self._canary_decisions.add(1, {"agent_id": agent_id, "decision": decision})

    def observe(self, decoded: Decoded) -> None:
        """Record what one NEXUS_RUNS event means for the metrics (non-run events ignored)."""
        run_id = decoded.address.run_id
        state = decoded.address.event
        if run_id is None or state is None or run_id == subjects.NEW_RUN_TOKEN:
            return  # a `requested` on `new` is re-published by core under the real id
        event = decoded.event
        ts = decoded.envelope.timestamp_ns
        run = self._track(run_id)
        self._update(run, event, ts)
        if state not in _COUNTED_STATES:
            return
        reason = event.reason if isinstance(event, TerminalEvent) else ""
        self._runs_counter.add(1, {"state": state, "reason": reason, "agent_id": run.agent_id})
        if isinstance(event, TerminalEvent):
            start = run.requested_ns if run.requested_ns is not None else run.started_ns
            duration = _seconds(start, ts)
            if duration is not None:
                self._duration.record(
                    duration, {"agent_id": run.agent_id, "state": state, "reason": reason}
                )
            self._runs.pop(run_id, None)

    def _update(self, run: _RunTimes, event: Event, ts: int | None) -> None:
        """Remember the run's agent and step times; record the per-step metrics."""
        if isinstance(event, RunRequested):
            run.agent_id = event.agent_id
            if run.requested_ns is None:
                run.requested_ns = ts
        elif isinstance(event, RunPrepared):
            run.agent_id = event.config.agent_id
        elif isinstance(event, RunDispatched):
            if run.dispatched_ns is None:  # a retried dispatch keeps the first time
                run.dispatched_ns = ts
                self._record(self._queue_wait, _seconds(run.requested_ns, ts), run.agent_id)
        elif isinstance(event, RunStarted):
            if run.started_ns is None:
                run.started_ns = ts
                self._record(self._start_latency, _seconds(run.dispatched_ns, ts), run.agent_id)
        elif isinstance(event, RunTurn):
            self._on_turn(run, event)
        elif isinstance(event, ToolCalled):
            if event.refused:
                run.refused_calls.add(event.call_id)
        elif isinstance(event, ToolResult):
            self._on_tool_result(run, event)
        else:
            self._on_resume(run, event)

    def _on_resume(self, run: _RunTimes, event: Event) -> None:
        if isinstance(event, RunResuming):
            run.woke = event.reason == Reason.WOKE
            if not run.woke:
                self._resumes.add(1, {"agent_id": run.agent_id, "reason": event.reason})
        elif isinstance(event, RunResumed):
            if run.woke:
                run.woke = False
            elif event.latency_ms is not None:
                self._resume_latency.record(event.latency_ms / 1000, {"agent_id": run.agent_id})
        elif isinstance(event, RunCondensed):
            attrs = {"agent_id": run.agent_id, "strategy": event.condensation.strategy}
            self._condensations.add(1, attrs)

    def _track(self, run_id: str) -> _RunTimes:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _RunTimes()
            if len(self._runs) > MAX_TRACKED_RUNS:
                self._runs.popitem(last=False)
        return run

    @staticmethod
    def _record(histogram: Any, seconds: float | None, agent_id: str) -> None:
        if seconds is not None:
            histogram.record(seconds, {"agent_id": agent_id})

    def _on_turn(self, run: _RunTimes, event: RunTurn) -> None:
        attrs = {"agent_id": run.agent_id, "model": event.model or "unknown"}
        self._turns.add(1, attrs)
        self._tokens.add(event.tokens_in, {**attrs, "direction": "input"})
        self._tokens.add(event.tokens_out, {**attrs, "direction": "output"})
        self._cost.add(event.cost_usd, attrs)

    def _on_tool_result(self, run: _RunTimes, event: ToolResult) -> None:
        if event.call_id in run.refused_calls:
            outcome = "refused"
            run.refused_calls.discard(event.call_id)
        else:
            outcome = "ok" if event.ok else "error"
        self._tool_calls.add(1, {"agent_id": run.agent_id, "tool": event.tool, "outcome": outcome})
        if event.duration_ms is not None:
            self._tool_duration.record(
                event.duration_ms / 1000, {"tool": event.tool, "outcome": outcome}
            )

    async def _handle(self, deliveries: list[Delivery]) -> None:
        for d in deliveries:
            self.observe(d.decoded)

    # -- pipeline polling --------------------------------------------------------------

    async def poll_once(self) -> PipelineSnapshot:
        """Refresh consumer, DLQ and projection gauges from JetStream and PostgreSQL."""
        snap = PipelineSnapshot(followers={f.name: (f.restarts, f.stuck) for f in self.followers})
        last_seq: dict[str, int] = {}
        for stream in sorted(set(STREAM_OF_FAMILY.values())):
            try:
                info = await self.bus.js.stream_info(stream)
                last_seq[stream] = info.state.last_seq
                for ci in await self.bus.js.consumers_info(stream):
                    if ci.config.durable_name:  # ephemeral replays come and go
                        snap.consumers[(stream, ci.name)] = (
                            ci.num_pending or 0,
                            ci.num_ack_pending or 0,
                        )
            except nats.js.errors.NotFoundError:
                continue
        dlq = await self.bus.js.stream_info(
            DLQ, subjects_filter=subjects.family_filter(subjects.Family.DLQ)
        )
        for subject, count in (dlq.state.subjects or {}).items():
            snap.dlq[subject.rsplit(".", 1)[-1]] = count
        if self.pool is not None:
            for (schema, stream), checkpoint in (await self._checkpoints()).items():
                if stream in last_seq:
                    snap.projections[(schema, stream)] = max(last_seq[stream] - checkpoint, 0)
        self.snapshot = snap
        return snap

    async def _checkpoints(self) -> dict[tuple[str, str], int]:
        assert self.pool is not None
        out: dict[tuple[str, str], int] = {}
        async with self.pool.acquire() as conn:
            schemas = await conn.fetch(
                "SELECT table_schema FROM information_schema.tables WHERE table_name = $1",
                CHECKPOINT_TABLE,
            )
            for row in schemas:
                schema = row["table_schema"]
                quoted = '"' + schema.replace('"', '""') + '"'
                rows = await conn.fetch(
                    f"SELECT stream, last_seq FROM {quoted}.{CHECKPOINT_TABLE}"  # noqa: S608
                )
                for r in rows:
                    out[(schema, r["stream"])] = int(r["last_seq"])
        return out

    def _observe_pending(self, _: CallbackOptions) -> Iterable[Observation]:
        for (stream, consumer), (pending, _ack) in self.snapshot.consumers.items():
            yield Observation(pending, {"stream": stream, "consumer": consumer})

    def _observe_ack_pending(self, _: CallbackOptions) -> Iterable[Observation]:
        for (stream, consumer), (_pending, ack) in self.snapshot.consumers.items():
            yield Observation(ack, {"stream": stream, "consumer": consumer})

    def _observe_dlq(self, _: CallbackOptions) -> Iterable[Observation]:
        for service, count in self.snapshot.dlq.items():
            yield Observation(count, {"service": service})

    def _observe_projection_lag(self, _: CallbackOptions) -> Iterable[Observation]:
        for (projection, stream), lag in self.snapshot.projections.items():
            yield Observation(lag, {"projection": projection, "stream": stream})

    def _observe_restarts(self, _: CallbackOptions) -> Iterable[Observation]:
        for name, (restarts, _stuck) in self.snapshot.followers.items():
            yield Observation(restarts, {"projection": name})

    def _observe_stuck(self, _: CallbackOptions) -> Iterable[Observation]:
        for name, (_restarts, stuck) in self.snapshot.followers.items():
            yield Observation(int(stuck), {"projection": name})

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Follow NEXUS_RUNS from where the durable consumer stopped, and start polling.
        Again after `stop` too: core's metrics follow the lease from replica to replica."""
        if not self.settings.enabled:
            return
        spec = ConsumerSpec(
            stream=RUNS,
            durable=self.settings.durable,
            filter_subjects=(subjects.family_filter(subjects.Family.RUN),),
            batch=500,
        )
        self._consumer = self.bus.consumer(spec, self._handle)
        await self._consumer.start()
        self._poller.start()

    async def stop(self) -> None:
        """Finish the batch in hand and stop polling."""
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        await self._poller.stop()
        self._runs.clear()  # a later term (this replica leading again) starts afresh

    async def __aenter__(self) -> RunMetrics:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# Lifecycle steps counted by `nexus.runs` (heartbeats, turns, tools, resumes and condensations
# have their own metrics; a failed resume is `failed` with reason resume_failed).
_COUNTED_STATES = frozenset(RunEvent) - {
    RunEvent.HEARTBEAT,
    RunEvent.TURN,
    RunEvent.TOOL_CALLED,
    RunEvent.TOOL_RESULT,
    RunEvent.APPROVAL_DECIDED,
    RunEvent.RESUMING,
    RunEvent.RESUMED,
    RunEvent.CHECKPOINTED,
    RunEvent.CONDENSED,
    RunEvent.EGRESS,
}


__all__ = ["INSTRUMENTS", "PipelineSnapshot", "RunMetrics", "RunMetricsSettings"]
