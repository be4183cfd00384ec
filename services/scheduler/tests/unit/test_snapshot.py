"""A lifecycle fold saved as a snapshot at any point, plus the events after it, equals the fold
of every event; and a snapshot that is not this version's is refused, never half-read."""

from __future__ import annotations

import json
import random
import uuid
import zlib
from datetime import UTC, datetime, timedelta

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded, Envelope
from nexus_events.events import Event
from nexus_scheduler.snapshot import (
    SNAPSHOT_VERSION,
    LifecycleFold,
    SnapshotInvalid,
    decode,
    encode,
)

from ..histories import comparable, random_history

T0 = datetime(2026, 11, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 2, tzinfo=UTC)


def _decoded(run_id: str, event: Event, seq: int, rng: random.Random) -> Decoded:
    subject = subjects.run_event(run_id, event.event_name)
    traceparent = None
    if rng.random() < 0.5:  # some traced, some not, a few malformed
        traceparent = (
            "garbage" if rng.random() < 0.1 else f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
        )
    at = T0 + timedelta(seconds=seq)
    envelope = Envelope(
        subject=subject,
        event_id=uuid.uuid4().hex,
        schema=event.event_name,
        source="test",
        traceparent=traceparent,
        stream_seq=seq,
        timestamp_ns=None if rng.random() < 0.05 else int(at.timestamp() * 1e9),
    )
    return Decoded(event=event, envelope=envelope, address=subjects.parse_subject(subject))


def _lifecycle(seed: int) -> list[tuple[int, Decoded]]:
    rng = random.Random(seed)
    history = random_history(rng, rng.randint(1, 40))
    out = [
        (seq, _decoded(run_id, event, seq, rng))
        for seq, (run_id, event) in enumerate(history, start=1)
    ]
    return [(seq, d) for seq, d in out if d.event.event_name not in ("heartbeat", "turn")]


@pytest.mark.parametrize("seed", range(150))
def test_snapshot_plus_tail_equals_the_whole_fold(seed: int) -> None:
    events = _lifecycle(seed)
    whole = LifecycleFold()
    for seq, d in events:
        whole.observe(d, seq, NOW)

    cut = random.Random(seed).randint(0, len(events))
    head = LifecycleFold()
    for seq, d in events[:cut]:
        head.observe(d, seq, NOW)
    resumed = LifecycleFold.from_snapshot(decode(encode(head.snapshot(T0))))
    for seq, d in events[cut:]:
        resumed.observe(d, seq, NOW)

    assert comparable(resumed.state) == comparable(whole.state)
    assert resumed.traces == whole.traces
    assert resumed.seq == whole.seq


def test_the_histories_cover_every_phase_and_the_traces() -> None:
    """The property above is not vacuous: the random folds hold runs in every phase, finished
    runs, early cancels and remembered traces."""
    phases: set[str] = set()
    finished = early = traced = 0
    for seed in range(150):
        fold = LifecycleFold()
        for seq, d in _lifecycle(seed):
            fold.observe(d, seq, NOW)
        phases |= {e.phase.value for e in fold.state.runs.values()}
        finished += len(fold.state.finished)
        early += len(fold.state.early_cancels)
        traced += len(fold.traces)
    # starting: a resumed run whose next attempt was not dispatched yet
    assert phases == {"waiting", "queued", "starting", "dispatched", "running"}
    assert finished > 100
    assert early > 0
    assert traced > 0


def test_a_copy_is_independent() -> None:
    fold = LifecycleFold()
    for seq, d in _lifecycle(3):
        fold.observe(d, seq, NOW)
    before = comparable(fold.state)
    copy = fold.copy()
    copy.state.runs.clear()
    copy.state.finished.add("another")
    assert comparable(fold.state) == before


def test_another_version_or_garbage_is_refused() -> None:
    fold = LifecycleFold()
    for seq, d in _lifecycle(5):
        fold.observe(d, seq, NOW)
    good = fold.snapshot(T0)
    newer = good.model_dump(mode="json") | {"version": SNAPSHOT_VERSION + 1, "new_field": 1}
    with pytest.raises(SnapshotInvalid, match="version"):
        decode(zlib.compress(json.dumps(newer).encode()))
    with pytest.raises(SnapshotInvalid, match="unreadable"):
        decode(b"not zlib at all")
    with pytest.raises(SnapshotInvalid, match="unreadable"):
        decode(zlib.compress(f'{{"version": {SNAPSHOT_VERSION}, "runs": "nope"}}'.encode()))
    older = good.model_dump(mode="json") | {"version": 1}  # before attempts were recorded
    with pytest.raises(SnapshotInvalid, match="version 1"):
        decode(zlib.compress(json.dumps(older).encode()))
    assert decode(encode(good)) == good
