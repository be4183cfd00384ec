"""Takeover from a snapshot: the same state as the rebuild from the stream, read from the events
after the snapshot only; a deposed leader's snapshot is refused; a snapshot that does not fit
the stream (or cannot be read) is ignored, never a crash."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import Event, RunCompleted
from nexus_events.runtime.clock import SystemClock
from nexus_events.runtime.lease import Lease
from nexus_events.transport.bus import Bus, Outgoing, decode_msg
from nexus_scheduler.admission import Limits, Timeouts
from nexus_scheduler.checkpoint import Checkpointer
from nexus_scheduler.rebuild import Rebuilt, advance, rebuild
from nexus_scheduler.service import SchedulerService, watched_subjects
from nexus_scheduler.snapshot import LifecycleFold, Snapshot
from nexus_scheduler.snapshot_store import HEAD_KEY, SnapshotStore

from tests.support.noop_runtime import NoopRuntime

from ..histories import comparable, random_history
from .conftest import AppFactory, publish

BUCKET = "test_scheduler_snapshot"


def _service(bus: Bus) -> SchedulerService:
    return SchedulerService(bus, NoopRuntime(), limits=Limits(), timeouts=Timeouts())


async def _publish(bus: Bus, plan: list[tuple[str, Event]]) -> None:
    if plan:
        await bus.publish_many(
            [Outgoing(subjects.run_event(run_id, e.event_name), e) for run_id, e in plan]
        )


async def _stored_lifecycle(bus: Bus, after: int = 0) -> int:
    """Watched events but heartbeats stored after sequence `after` (a repeated event, e.g. a
    second ending, may have been deduplicated by the stream: count what it holds)."""
    names = []
    async for msg in bus.replay_raw(RUNS, start_seq=after + 1, filter_subjects=watched_subjects()):
        names.append(decode_msg(msg).event.event_name)
    return sum(1 for n in names if n != "heartbeat")


async def _snapshot_now(
    bus: Bus, store: SnapshotStore, lease_revision: int = 1, lease_epoch: datetime | None = None
) -> Snapshot:
    """What a leader's checkpointer writes: the lifecycle fold up to the stream's end."""
    info = await bus.js.stream_info(RUNS)
    fold = LifecycleFold()
    await advance(bus, fold, info.state.last_seq)
    snapshot = fold.snapshot(info.created)
    written = await store.write(snapshot, lease_revision, lease_epoch)
    assert written.head is not None
    return snapshot


async def _rebuilt(bus: Bus, snapshot: Snapshot | None) -> tuple[SchedulerService, Rebuilt]:
    service = _service(bus)
    return service, await rebuild(bus, service, snapshot)


@pytest.mark.parametrize("seed", range(6))
async def test_snapshot_and_tail_equal_the_rebuild_from_the_stream(bus: Bus, seed: int) -> None:
    rng = random.Random(seed)
    history = random_history(rng, 60)
    cut = rng.randint(len(history) // 4, 3 * len(history) // 4)
    await _publish(bus, history[:cut])
    cut_seq = (await bus.js.stream_info(RUNS)).state.last_seq
    store = SnapshotStore(bus, BUCKET, "test")
    written = await _snapshot_now(bus, store)
    await _publish(bus, history[cut:])

    loaded = await store.load()
    assert loaded == written
    fast, from_snapshot = await _rebuilt(bus, loaded)
    slow, from_stream = await _rebuilt(bus, None)

    assert comparable(fast.state) == comparable(slow.state)
    assert len(fast.traces) == len(slow.traces)
    assert from_snapshot.snapshot_seq == written.stream_seq == cut_seq
    assert from_snapshot.replayed == await _stored_lifecycle(bus, cut_seq)
    assert from_stream.replayed == await _stored_lifecycle(bus)
    assert from_snapshot.heartbeats == from_stream.heartbeats
    assert from_snapshot.last_seq == from_stream.last_seq
    # The fold handed to the checkpointer is the lifecycle fold at the end, beats aside.
    assert comparable(from_snapshot.fold.state)["finished"] == comparable(slow.state)["finished"]
    assert from_snapshot.fold.seq == from_stream.last_seq


async def test_the_comparison_sees_open_runs_and_beats(bus: Bus) -> None:
    """Not vacuous: the random histories leave runs open in each phase, with beats folded."""
    rng = random.Random(1)
    await _publish(bus, random_history(rng, 60))
    service, rebuilt = await _rebuilt(bus, None)
    phases = {e.phase.value for e in service.state.runs.values()}
    assert {"waiting", "queued", "dispatched", "running"} <= phases
    assert rebuilt.heartbeats > 0
    assert len(service.state.finished) > 10


async def test_a_deposed_leaders_snapshot_is_refused(bus: Bus) -> None:
    first = Lease(bus.js, "test_lease", "first", ttl=30)
    second = Lease(bus.js, "test_lease", "second", ttl=30)
    try:
        assert await first.acquire()
        deposed = first.revision
        assert deposed is not None
        # The key goes (an expiry, or an operator) and the standby takes it.
        await (await bus.js.key_value("test_lease")).delete("leader")
        assert await second.acquire()
        assert second.revision is not None
        assert second.revision > deposed

        await _publish(bus, random_history(random.Random(2), 10))
        assert first.epoch is not None
        assert first.epoch == second.epoch  # one lease bucket: revisions compare
        newer = await _snapshot_now(
            bus, SnapshotStore(bus, BUCKET, "second"), second.revision, second.epoch
        )
        await publish(bus, "another", RunCompleted())
        info = await bus.js.stream_info(RUNS)
        fold = LifecycleFold()
        await advance(bus, fold, info.state.last_seq)
        stale = fold.snapshot(info.created)

        written = await SnapshotStore(bus, BUCKET, "first").write(stale, deposed, first.epoch)

        assert written.head is None
        assert "newer leader" in written.reason
        store = SnapshotStore(bus, BUCKET, "reader")
        assert await store.load() == newer
        _, head = await store.head()
        assert head is not None
        assert head.holder == "second"
        # The current leader goes on writing over its own snapshot.
        again = await SnapshotStore(bus, BUCKET, "second").write(
            stale, second.revision, second.epoch
        )
        assert again.head is not None
        assert await store.load() == stale
    finally:
        await first.release()
        await second.release()


async def test_the_checkpointer_writes_after_enough_events_and_only_under_the_lease(
    bus: Bus,
) -> None:
    held: list[tuple[int, datetime | None] | None] = [None]

    async def lease() -> tuple[int, datetime | None] | None:
        return held[0]

    store = SnapshotStore(bus, BUCKET, "test")
    info = await bus.js.stream_info(RUNS)
    checkpointer = Checkpointer(
        bus,
        store,
        LifecycleFold(),
        stream_created=info.created,
        written_seq=0,
        min_events=5,
        lease_revision=lease,
        clock=SystemClock(),
    )
    history = random_history(random.Random(8), 10)
    await _publish(bus, history[:3])
    assert await checkpointer.step() is None  # 3 new messages: not yet
    await _publish(bus, history[3:])
    assert await checkpointer.step() is None  # enough, but the lease is not held
    assert await store.load() is None

    held[0] = (7, None)
    written = await checkpointer.step()

    assert written is not None
    assert written.head is not None
    last = (await bus.js.stream_info(RUNS)).state.last_seq
    assert written.head.stream_seq == checkpointer.written_seq == last
    loaded = await store.load()
    assert loaded is not None
    slow, _ = await _rebuilt(bus, None)
    assert [r.run_id for r in loaded.runs] == list(slow.state.runs)
    assert await checkpointer.step() is None  # nothing new since


async def test_revisions_of_a_recreated_lease_bucket_are_not_compared(bus: Bus) -> None:
    """Revisions count from 1 again in a new lease bucket: its holder may replace a snapshot
    written under the old one with a higher revision; within one bucket it may not."""
    old, new = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)
    store = SnapshotStore(bus, BUCKET, "test")
    await _publish(bus, random_history(random.Random(7), 5))
    first = await _snapshot_now(bus, store, 1000, old)
    await publish(bus, "another", RunCompleted())
    info = await bus.js.stream_info(RUNS)
    fold = LifecycleFold()
    await advance(bus, fold, info.state.last_seq)
    second = fold.snapshot(info.created)

    assert (await store.write(second, 2, old)).head is None
    assert await store.load() == first
    assert (await store.write(second, 2, new)).head is not None
    assert await store.load() == second


async def test_a_snapshot_past_the_streams_end_or_of_another_stream_is_ignored(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    history = random_history(random.Random(3), 20)
    await _publish(bus, history)
    good = await _snapshot_now(bus, SnapshotStore(bus, BUCKET, "test"))
    slow, _ = await _rebuilt(bus, None)
    caplog.set_level(logging.WARNING, logger="nexus_scheduler.rebuild")

    ahead = good.model_copy(update={"stream_seq": good.stream_seq + 1000})
    service, rebuilt = await _rebuilt(bus, ahead)
    assert rebuilt.snapshot_seq is None
    assert rebuilt.replayed == await _stored_lifecycle(bus)
    assert comparable(service.state) == comparable(slow.state)
    assert any("the stream ends at" in r.getMessage() for r in caplog.records)

    assert good.stream_created is not None
    earlier = good.model_copy(update={"stream_created": good.stream_created.replace(year=2001)})
    service, rebuilt = await _rebuilt(bus, earlier)
    assert rebuilt.snapshot_seq is None
    assert comparable(service.state) == comparable(slow.state)
    assert any("earlier NEXUS_RUNS" in r.getMessage() for r in caplog.records)


async def test_a_snapshot_older_than_the_streams_first_message_still_serves(bus: Bus) -> None:
    """Retention dropped the history the snapshot covers: the tail read starts at the first
    message left, and the open runs the snapshot knows survive (the stream alone lost them)."""
    rng = random.Random(4)
    history = random_history(rng, 40)
    cut = len(history) // 2
    await _publish(bus, history[:cut])
    snapshot = await _snapshot_now(bus, SnapshotStore(bus, BUCKET, "test"))
    await _publish(bus, history[cut:])
    before, _ = await _rebuilt(bus, snapshot)
    # Drop everything up to two messages past the snapshot.
    await bus.js.purge_stream(RUNS, seq=snapshot.stream_seq + 3)
    info = await bus.js.stream_info(RUNS)
    assert info.state.first_seq == snapshot.stream_seq + 3

    after, rebuilt = await _rebuilt(bus, snapshot)

    assert rebuilt.snapshot_seq == snapshot.stream_seq
    dropped = history[cut : cut + 2]
    if not any(e.event_name not in ("heartbeat", "turn") for _, e in dropped):
        assert comparable(after.state) == comparable(before.state)
    assert set(before.state.runs) - {r for r, _ in dropped} <= set(after.state.runs)
    stream_only, _ = await _rebuilt(bus, None)
    assert len(stream_only.state.runs) < len(after.state.runs)


async def test_a_new_leader_starts_from_the_snapshot_its_predecessor_wrote(
    make_app: AppFactory, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(5)
    history = random_history(rng, 40)
    cut = len(history) // 2
    await _publish(bus, history[:cut])
    first = await make_app(snapshot_min_events=1, max_concurrent_runs=1000)
    assert first.checkpointer is not None
    await first.checkpointer.step()  # (also runs at once in the background; both are fine)
    written = first.checkpointer.written_seq
    assert written >= cut
    await first.stop()
    await _publish(bus, history[cut:])
    info = await bus.js.stream_info(RUNS)
    after = await _stored_lifecycle(bus, written)

    caplog.set_level(logging.INFO, logger="nexus_scheduler.app")
    second = await make_app(snapshot_min_events=1, max_concurrent_runs=1000)

    [record] = [r for r in caplog.records if r.getMessage() == "leading: state rebuilt"]
    assert record.__dict__["snapshot_seq"] == written
    assert record.__dict__["replayed"] == after
    assert second.service is not None
    slow, _ = await _rebuilt(bus, None)
    # The first leader's own events (queued, dispatched) are part of both histories.
    assert set(second.service.state.runs) == set(slow.state.runs)
    assert info.state.last_seq > written


async def test_an_unreadable_snapshot_falls_back_to_the_stream(
    make_app: AppFactory, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    history = random_history(random.Random(6), 20)
    await _publish(bus, history)
    kv = await bus.js.create_key_value(bucket="nexus_scheduler_snapshot", history=1)
    await kv.put(HEAD_KEY, b'{"slot": "c", "nonsense": true}')
    caplog.set_level(logging.INFO)
    stored = await _stored_lifecycle(bus)  # before the leader adds its own events

    app = await make_app(max_concurrent_runs=1000)

    [record] = [r for r in caplog.records if r.getMessage() == "leading: state rebuilt"]
    assert record.__dict__["snapshot_seq"] is None
    assert record.__dict__["replayed"] == stored
    assert any("snapshot head unreadable" in r.getMessage() for r in caplog.records)
    assert app.leading.is_set()
