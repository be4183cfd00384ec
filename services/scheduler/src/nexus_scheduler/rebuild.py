"""Takeover: rebuild the admission state from a snapshot and the NEXUS_RUNS events after it.

A runner beats every ~15 s, so heartbeats are most of NEXUS_RUNS (a one-hour run leaves
~240 of them and ten other lifecycle events), and even the lifecycle events grow with the
stream's retention. Admission needs the open runs only, so a takeover reads:

0. the newest snapshot (`nexus_scheduler.snapshot`, stored by `snapshot_store`): the fold of
   pass 1 below as a leader saved it at some stream sequence `S`. None (missing, unreadable,
   another version, from a recreated stream, or beyond the stream's end) means `S = 0`;
1. every watched lifecycle event except heartbeats (`prepared`, `queued`, `dispatched`,
   `started`, `resuming`, cancels and endings: about five per run) after `S`, up to the
   stream's last sequence at the start, folded in stream order. One consumer per event name, read
   concurrently and merged by sequence: nats-server 2.15 delivers a consumer with several
   filter subjects about ten times slower than one with a single filter (measured in
   bench/bench_scheduler). A snapshot older than the stream's first sequence is fine: the
   read starts at the first message left;
2. the last heartbeat of each run left open, through a `last_per_subject` consumer filtered
   on those runs' heartbeat subjects: one message per open run.

The fold of pass 1 is deterministic (an event's time is its envelope timestamp), so the
snapshot at `S` plus the events after it is the fold of every lifecycle event: the same state
as without a snapshot, read in time that grows with the events since the snapshot and the
open runs, not with the history. Folding a run's last heartbeat after its lifecycle events
gives the state the full replay gives: a heartbeat sets the run `running` and moves
`last_seen` forward to the newest beat, and the runner beats only after its `started`. A
heartbeat stored after the first pass (newer than `last_seq`) is delivered again by the live
consumer, which folds idempotently.

The pass-1 fold is handed on (`Rebuilt.fold`) to the leader's `Checkpointer`, which keeps it
current and writes the next snapshots.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from dataclasses import dataclass
from datetime import datetime

from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import RUNS
from nexus_events.errors import DecodeError
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.transport.bus import Bus, decode_msg

from nexus_scheduler.service import WATCHED_EVENTS, SchedulerService
from nexus_scheduler.snapshot import LifecycleFold, Snapshot

log = logging.getLogger(__name__)

# Run events the first pass replays: all that admission watches but the heartbeats.
LIFECYCLE_EVENTS = tuple(name for name in WATCHED_EVENTS if name != RunEvent.HEARTBEAT)
# Heartbeat subjects per last-per-subject consumer: 500 subjects of ~60 bytes keep the
# consumer's create request far below the 1 MB max_payload.
HEARTBEAT_FILTERS_PER_READ = 500


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild read: `replayed` lifecycle events and the `heartbeats` of open runs,
    the stream sequence the first pass ended at (0: an empty stream), the sequence of the
    snapshot it started from (None: none used), and the pass-1 fold at `last_seq` (a copy,
    independent of the service's state)."""

    replayed: int
    heartbeats: int
    last_seq: int
    snapshot_seq: int | None
    fold: LifecycleFold
    stream_created: datetime | None


def lifecycle_subjects() -> tuple[str, ...]:
    return tuple(subjects.run_events_filter(event=name) for name in LIFECYCLE_EVENTS)


async def rebuild(bus: Bus, service: SchedulerService, snapshot: Snapshot | None = None) -> Rebuilt:
    """Fold `snapshot` and NEXUS_RUNS after it into `service`'s state (see the module
    docstring for the passes). A snapshot that does not fit the stream is logged and ignored.

    Undecodable messages are skipped; the live durable consumer dead-letters them.
    """
    info = await bus.js.stream_info(RUNS)
    cut = info.state.last_seq  # both passes fold up to here; the live consumer goes on
    usable = snapshot if snapshot is not None and _fits(snapshot, cut, info.created) else None
    fold = LifecycleFold.from_snapshot(usable) if usable is not None else LifecycleFold()
    replayed = await advance(bus, fold, cut, service.clock)
    # The service gets the fold itself; the checkpointer a copy it may go on folding into.
    handed = fold.copy()
    service.state = fold.state
    service.traces.restore(fold.traces)
    open_runs = list(service.state.runs)
    heartbeats = 0
    for start in range(0, len(open_runs), HEARTBEAT_FILTERS_PER_READ):
        chunk = open_runs[start : start + HEARTBEAT_FILTERS_PER_READ]
        filters = [subjects.run_event(run_id, RunEvent.HEARTBEAT) for run_id in chunk]
        async for msg in bus.replay_raw(RUNS, filter_subjects=filters, last_per_subject=True):
            try:
                service.observe(decode_msg(msg), replay=True)
            except DecodeError:
                continue
            heartbeats += 1
    return Rebuilt(
        replayed=replayed,
        heartbeats=heartbeats,
        last_seq=cut,
        snapshot_seq=usable.stream_seq if usable is not None else None,
        fold=handed,
        stream_created=info.created,
    )


def _fits(snapshot: Snapshot, last_seq: int, created: datetime | None) -> bool:
    """Whether `snapshot` is of this NEXUS_RUNS: not of a stream since deleted and created
    again (its creation time, or a sequence past the stream's end, says so)."""
    if snapshot.stream_seq > last_seq:
        log.warning(
            "scheduler snapshot ignored: it reflects sequence %s, the stream ends at %s"
            " (recreated?)",
            snapshot.stream_seq,
            last_seq,
        )
        return False
    known = snapshot.stream_created is not None and created is not None
    if known and snapshot.stream_created != created:
        log.warning("scheduler snapshot ignored: it is of an earlier NEXUS_RUNS (recreated)")
        return False
    return True


async def advance(bus: Bus, fold: LifecycleFold, cut: int, clock: Clock | None = None) -> int:
    """Fold the lifecycle events after `fold.seq` up to `cut` into `fold`; return how many
    were folded. An event without a timestamp gets `clock`'s time, as a replay in the
    service gives it."""
    now = (clock or SystemClock()).now()
    if cut <= fold.seq:
        return 0
    per_event = await asyncio.gather(
        *(_read_to(bus, f, fold.seq + 1, cut) for f in lifecycle_subjects())
    )
    folded = 0
    for seq, msg in heapq.merge(*per_event, key=lambda item: item[0]):
        try:
            decoded = decode_msg(msg)
        except DecodeError:
            continue
        fold.observe(decoded, seq, now)
        folded += 1
    fold.seq = max(fold.seq, cut)
    return folded


async def _read_to(bus: Bus, filter_subject: str, start: int, cut: int) -> list[tuple[int, Msg]]:
    """(stream seq, message) of one event name, in stream order, from `start` up to `cut`."""
    out: list[tuple[int, Msg]] = []
    # The replay ends where the stream ended when it began, at most a few events past `cut`;
    # a start before the stream's first sequence begins at the first message left.
    async for msg in bus.replay_raw(RUNS, filter_subject=filter_subject, start_seq=start):
        seq = msg.metadata.sequence.stream
        if seq <= cut:
            out.append((seq, msg))
    return out
