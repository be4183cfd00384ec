"""The admission state folded from NEXUS_RUNS's lifecycle events, and its snapshot on the wire.

`LifecycleFold` is what the first pass of a takeover (`nexus_scheduler.rebuild`) computes: the
`AdmissionState` folded from every watched event but the heartbeats, in stream order, up to a
stream sequence, with the trace headers a `SchedulerService` would remember on the way. The
fold is deterministic (a replayed event's time is its envelope timestamp), so folding events
1..k and then k+1..n gives the state folding 1..n gives: a fold saved at k (`Snapshot`) plus
the lifecycle events after k is the same first pass, read in time proportional to the events
since the snapshot instead of the stream's whole history.

A `Snapshot` is plain data (pydantic, JSON) with a `version`: a snapshot of another version
is refused by `decode` (`SnapshotInvalid`) and the takeover reads the stream instead.
Counters (active runs per agent and task) are not stored: they are derived from the runs.
"""

from __future__ import annotations

import zlib
from datetime import datetime

from nexus_events.contract.codec import Decoded
from nexus_events.events import RunConfig, RunWake, WakeCause
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_scheduler.admission import (
    AdmissionState,
    Asleep,
    CancelInfo,
    PendingWake,
    Phase,
    RecentlyFinished,
    RunEntry,
)
from nexus_scheduler.tracing import valid_traceparent

# Bump on any change of the models below that an older scheduler could misread; a snapshot
# of another version is ignored (the takeover then reads the stream), never migrated.
# 2: runs record their attempt and first dispatch (resume, issue 24).
# 3: runs record their budget pause and the budget reason they were reported queued with.
# 4: runs record their sleep, the time slept, the attempts that slept and their wake (issue 42).
SNAPSHOT_VERSION = 4


class SnapshotInvalid(ValueError):  # noqa: N818 - reads as a fact: "the snapshot is invalid"
    """The bytes are not a snapshot this scheduler can use (corrupt, or another version)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CancelSnapshot(_Model):
    at: datetime = Field(description="When the cancel was requested (its event's time).")
    reason: str = Field(description="The cancel's reason.")
    requested_by: str | None = Field(None, description="Who asked for it.")


class PendingWakeSnapshot(_Model):
    cause: WakeCause = Field(description="What asked the wake (signal or message).")
    text: str = Field("", description="The signal's reason or the message.")
    requested_by: str | None = Field(None, description="Who asked.")


class AsleepSnapshot(_Model):
    until: datetime = Field(description="The wake time its `sleeping` asked for.")
    reason: str = Field("", description="Why it sleeps.")
    attempt: int = Field(ge=1, description="The attempt that slept.")
    stamp: datetime | None = Field(None, description="Stream time of its `sleeping`.")
    woken_by: PendingWakeSnapshot | None = Field(None, description="A wake asked meanwhile.")


class RunSnapshot(_Model):
    run_id: str = Field(description="The run.")
    config: RunConfig = Field(description="Its RunConfig, from `prepared`.")
    phase: Phase = Field(description="Its admission phase.")
    prepared_at: datetime | None = Field(None, description="Time of its `prepared`.")
    queued_position: int | None = Field(None, description="Position its `queued` reported.")
    dispatched_at: datetime | None = Field(None, description="Time it was dispatched.")
    last_seen: datetime | None = Field(None, description="Newest sign of life folded.")
    handle: str | None = Field(None, description="The runtime's handle of it.")
    cancel: CancelSnapshot | None = Field(None, description="A cancel requested of it.")
    attempt: int = Field(1, ge=1, description="Its current attempt (`dispatched`/`resuming`).")
    first_dispatched_at: datetime | None = Field(
        None, description="Time of its first attempt's dispatch: the deadline counts from it."
    )
    budget_paused: bool = Field(False, description="Paused on a reached budget: holds no slot.")
    budget_turn: int = Field(0, ge=0, description="Turn of the budget event folded last.")
    budget_wait: str | None = Field(
        None, description="Why a budget holds it queued, as its last `queued` said."
    )
    sleep: AsleepSnapshot | None = Field(None, description="The sleep under way (SLEEPING).")
    asleep_since: datetime | None = Field(
        None, description="When it slept, until the woken attempt's dispatch."
    )
    paused_seconds: float = Field(0.0, ge=0, description="Time slept: not on the deadline.")
    slept_attempts: int = Field(0, ge=0, description="Attempts that ended in a sleep.")
    wake: RunWake | None = Field(None, description="The wake its current attempt starts with.")


class TraceHeaders(_Model):
    traceparent: str = Field(description="W3C traceparent of the run's first traced event.")
    tracestate: str | None = Field(None, description="W3C tracestate beside it.")


class _Versioned(BaseModel):
    version: int


class Snapshot(_Model):
    version: int = Field(description="SNAPSHOT_VERSION of the writer.")
    stream_seq: int = Field(ge=0, description="Last NEXUS_RUNS sequence the state reflects.")
    stream_created: datetime | None = Field(
        None, description="NEXUS_RUNS's creation time: a recreated stream voids the snapshot."
    )
    runs: list[RunSnapshot] = Field(description="Open runs, in the order they were prepared.")
    waiting: list[str] = Field(description="Waiting run ids, first in line first.")
    finished: list[str] = Field(description="Recently finished run ids, oldest first.")
    early_cancels: dict[str, CancelSnapshot] = Field(
        description="Cancels of runs whose `prepared` has not been seen."
    )
    traces: dict[str, TraceHeaders] = Field(
        description="Trace headers remembered per run not finished."
    )


class LifecycleFold:
    """Admission state folded from lifecycle events up to `seq`, with the runs' trace headers."""

    def __init__(
        self,
        state: AdmissionState | None = None,
        seq: int = 0,
        traces: dict[str, tuple[str, str | None]] | None = None,
    ) -> None:
        self.state = state or AdmissionState()
        self.seq = seq
        # (traceparent, tracestate) of the first validly traced event of each run not
        # finished: what `RunTraces.remember_headers` keeps.
        self.traces: dict[str, tuple[str, str | None]] = traces or {}

    def observe(self, decoded: Decoded, seq: int, now: datetime) -> bool:
        """Fold one event stored at stream sequence `seq` as `SchedulerService.observe`
        does on a replay (its time: the envelope timestamp, else `now`)."""
        self.seq = max(self.seq, seq)
        run_id = decoded.address.run_id
        if run_id is None:
            return False
        envelope = decoded.envelope
        tp, ts = envelope.traceparent, envelope.tracestate
        if (
            tp
            and run_id not in self.state.finished
            and run_id not in self.traces
            and valid_traceparent(tp, ts)
        ):
            self.traces[run_id] = (tp, ts)
        changed = self.state.evolve(
            run_id, decoded.event, envelope.timestamp or now, stamp=envelope.timestamp
        )
        if run_id in self.state.finished:
            self.traces.pop(run_id, None)
        return changed

    def snapshot(self, stream_created: datetime | None) -> Snapshot:
        state = self.state
        return Snapshot(
            version=SNAPSHOT_VERSION,
            stream_seq=self.seq,
            stream_created=stream_created,
            runs=[_run_snapshot(e) for e in state.runs.values()],
            waiting=list(state.waiting),
            finished=list(state.finished),
            early_cancels={r: _cancel_snapshot(c) for r, c in state.early_cancels.items()},
            traces={
                r: TraceHeaders(traceparent=tp, tracestate=ts)
                for r, (tp, ts) in self.traces.items()
            },
        )

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> LifecycleFold:
        state = AdmissionState()
        for run in snapshot.runs:
            entry = RunEntry(
                run_id=run.run_id,
                config=run.config,
                phase=run.phase,
                prepared_at=run.prepared_at,
                queued_position=run.queued_position,
                dispatched_at=run.dispatched_at,
                last_seen=run.last_seen,
                handle=run.handle,
                cancel=_cancel_info(run.cancel) if run.cancel is not None else None,
                attempt=run.attempt,
                first_dispatched_at=run.first_dispatched_at,
                budget_paused=run.budget_paused,
                budget_turn=run.budget_turn,
                budget_wait=run.budget_wait,
                sleep=_asleep(run.sleep) if run.sleep is not None else None,
                asleep_since=run.asleep_since,
                paused_seconds=run.paused_seconds,
                slept_attempts=run.slept_attempts,
                wake=run.wake,
            )
            state.runs[run.run_id] = entry
            if entry.phase is Phase.SLEEPING:
                state.sleeping.add(run.run_id)
            if entry.holds_slot:
                state.active_total += 1
                state.active_by_agent[entry.agent_id] += 1
                if entry.task_id is not None:
                    state.active_by_task[entry.task_id] += 1
        state.waiting = dict.fromkeys(r for r in snapshot.waiting if r in state.runs)
        state.finished = RecentlyFinished()
        for run_id in snapshot.finished:
            state.finished.add(run_id)
        state.early_cancels = {r: _cancel_info(c) for r, c in snapshot.early_cancels.items()}
        traces = {r: (h.traceparent, h.tracestate) for r, h in snapshot.traces.items()}
        return cls(state, snapshot.stream_seq, traces)

    def copy(self) -> LifecycleFold:
        """An independent copy (through the snapshot model, which copies every entry)."""
        return LifecycleFold.from_snapshot(self.snapshot(None))


def encode(snapshot: Snapshot) -> bytes:
    """JSON, zlib-compressed: run configs and finished ids compress about 3:1."""
    return zlib.compress(snapshot.model_dump_json().encode(), level=1)


def decode(data: bytes) -> Snapshot:
    """The snapshot in `data`; `SnapshotInvalid` if corrupt or of another version."""
    try:
        raw = zlib.decompress(data)
        # The version first: another version's fields need not validate as ours.
        version = _Versioned.model_validate_json(raw).version
        if version != SNAPSHOT_VERSION:
            raise SnapshotInvalid(
                f"snapshot version {version}, this scheduler reads {SNAPSHOT_VERSION}"
            )
        return Snapshot.model_validate_json(raw)
    except (zlib.error, ValidationError) as exc:
        raise SnapshotInvalid(f"unreadable snapshot: {exc}") from exc


def _run_snapshot(entry: RunEntry) -> RunSnapshot:
    return RunSnapshot(
        run_id=entry.run_id,
        config=entry.config,
        phase=entry.phase,
        prepared_at=entry.prepared_at,
        queued_position=entry.queued_position,
        dispatched_at=entry.dispatched_at,
        last_seen=entry.last_seen,
        handle=entry.handle,
        cancel=_cancel_snapshot(entry.cancel) if entry.cancel is not None else None,
        attempt=entry.attempt,
        first_dispatched_at=entry.first_dispatched_at,
        budget_paused=entry.budget_paused,
        budget_turn=entry.budget_turn,
        budget_wait=entry.budget_wait,
        sleep=_asleep_snapshot(entry.sleep) if entry.sleep is not None else None,
        asleep_since=entry.asleep_since,
        paused_seconds=entry.paused_seconds,
        slept_attempts=entry.slept_attempts,
        wake=entry.wake,
    )


def _asleep_snapshot(sleep: Asleep) -> AsleepSnapshot:
    w = sleep.woken_by
    return AsleepSnapshot(
        until=sleep.until,
        reason=sleep.reason,
        attempt=sleep.attempt,
        stamp=sleep.stamp,
        woken_by=None
        if w is None
        else PendingWakeSnapshot(cause=w.cause, text=w.text, requested_by=w.requested_by),
    )


def _asleep(snap: AsleepSnapshot) -> Asleep:
    w = snap.woken_by
    return Asleep(
        until=snap.until,
        reason=snap.reason,
        attempt=snap.attempt,
        stamp=snap.stamp,
        woken_by=None if w is None else PendingWake(w.cause, w.text, w.requested_by),
    )


def _cancel_snapshot(info: CancelInfo) -> CancelSnapshot:
    return CancelSnapshot(at=info.at, reason=info.reason, requested_by=info.requested_by)


def _cancel_info(snap: CancelSnapshot) -> CancelInfo:
    return CancelInfo(at=snap.at, reason=snap.reason, requested_by=snap.requested_by)
