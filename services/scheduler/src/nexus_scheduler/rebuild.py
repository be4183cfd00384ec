"""Takeover: rebuild the admission state from NEXUS_RUNS without reading its history of beats.

A runner beats every ~15 s, so heartbeats are most of NEXUS_RUNS (a one-hour run leaves
~240 of them and ten other lifecycle events), and a new leader that replays them all takes
longer the longer the stream's retention. Admission needs only the newest heartbeat of each
run still open, so the rebuild reads in two passes:

1. every watched lifecycle event except heartbeats, in stream order (`prepared`, `queued`,
   `dispatched`, `started`, cancels and endings: about ten per run);
2. the last heartbeat of each run left open, through a `last_per_subject` consumer filtered
   on those runs' heartbeat subjects: one message per open run.

Folding a run's last heartbeat after its lifecycle events gives the state the full replay
gives: a heartbeat sets the run `running` and moves `last_seen` forward to the newest beat,
and the runner beats only after its `started`. A heartbeat stored after the first pass
(newer than `last_seq`) is delivered again by the live consumer, which folds idempotently.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    replayed = last_seq = 0
    async for msg in bus.replay_raw(RUNS, filter_subjects=lifecycle_subjects()):
        last_seq = max(last_seq, msg.metadata.sequence.stream)
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
    return Rebuilt(replayed=replayed, heartbeats=heartbeats, last_seq=last_seq)
