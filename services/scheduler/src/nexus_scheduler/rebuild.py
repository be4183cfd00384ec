"""Takeover: rebuild the admission state from NEXUS_RUNS without reading its history of beats.

A runner beats every ~15 s, so heartbeats are most of NEXUS_RUNS (a one-hour run leaves
~240 of them and ten other lifecycle events), and a new leader that replays them all takes
longer the longer the stream's retention. Admission needs only the newest heartbeat of each
run still open, so the rebuild reads in two passes:

1. every watched lifecycle event except heartbeats (`prepared`, `queued`, `dispatched`,
   `started`, cancels and endings: about five per run), up to the stream's last sequence at
   the start, folded in stream order. One consumer per event name, read concurrently and
   merged by sequence: nats-server 2.15 delivers a consumer with several filter subjects
   about ten times slower than one with a single filter (measured in bench/bench_scheduler);
2. the last heartbeat of each run left open, through a `last_per_subject` consumer filtered
   on those runs' heartbeat subjects: one message per open run.

Folding a run's last heartbeat after its lifecycle events gives the state the full replay
gives: a heartbeat sets the run `running` and moves `last_seen` forward to the newest beat,
and the runner beats only after its `started`. A heartbeat stored after the first pass
(newer than `last_seq`) is delivered again by the live consumer, which folds idempotently.
"""

from __future__ import annotations

import asyncio
import heapq
from dataclasses import dataclass

from nats.aio.msg import Msg
from nexus_events import subjects
from nexus_events.bus import Bus, decode_msg
from nexus_events.errors import DecodeError
from nexus_events.streams import RUNS

from nexus_scheduler.service import WATCHED_EVENTS, SchedulerService

# Run events the first pass replays: all that admission watches but the heartbeats.
LIFECYCLE_EVENTS = tuple(name for name in WATCHED_EVENTS if name != "heartbeat")
# Heartbeat subjects per last-per-subject consumer: 500 subjects of ~60 bytes keep the
# consumer's create request far below the 1 MB max_payload.
HEARTBEAT_FILTERS_PER_READ = 500


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild read: `replayed` lifecycle events and the `heartbeats` of open runs,
    and the stream sequence the first pass ended at (0: an empty stream)."""

    replayed: int
    heartbeats: int
    last_seq: int


def lifecycle_subjects() -> tuple[str, ...]:
    return tuple(subjects.run_events_filter(event=name) for name in LIFECYCLE_EVENTS)


async def rebuild(bus: Bus, service: SchedulerService) -> Rebuilt:
    """Fold NEXUS_RUNS into `service`'s state (see the module docstring for the passes).

    Undecodable messages are skipped; the live durable consumer dead-letters them.
    """
    info = await bus.js.stream_info(RUNS)
    cut = info.state.last_seq  # both passes fold up to here; the live consumer goes on
    replayed = 0
    per_event = await asyncio.gather(*(_read_to(bus, f, cut) for f in lifecycle_subjects()))
    for _, msg in heapq.merge(*per_event, key=lambda item: item[0]):
        try:
            service.observe(decode_msg(msg), replay=True)
        except DecodeError:
            continue
        replayed += 1
    open_runs = list(service.state.runs)
    heartbeats = 0
    for start in range(0, len(open_runs), HEARTBEAT_FILTERS_PER_READ):
        chunk = open_runs[start : start + HEARTBEAT_FILTERS_PER_READ]
        filters = [subjects.run_event(run_id, "heartbeat") for run_id in chunk]
        async for msg in bus.replay_raw(RUNS, filter_subjects=filters, last_per_subject=True):
            try:
                service.observe(decode_msg(msg), replay=True)
            except DecodeError:
                continue
            heartbeats += 1
    return Rebuilt(replayed=replayed, heartbeats=heartbeats, last_seq=cut)


async def _read_to(bus: Bus, filter_subject: str, cut: int) -> list[tuple[int, Msg]]:
    """(stream seq, message) of one event name, in stream order, up to `cut`."""
    out: list[tuple[int, Msg]] = []
    # The replay ends where the stream ended when it began, at most a few events past `cut`.
    async for msg in bus.replay_raw(RUNS, filter_subject=filter_subject):
        seq = msg.metadata.sequence.stream
        if seq <= cut:
            out.append((seq, msg))
    return out
