"""The run's write-ahead transcript (NEXUS_TRANSCRIPTS): every message the model is sent, and
every condensation, as one `TranscriptEntry`, stored before the model call that sends it;
and the fold that turns a run's entries back into the exact messages (docs/resume.md).

Entries hold what the model saw, unredacted (a tool's output with a secret it read is sent to
the model as it is): the stream is readable by runners only (nexus_events.contract.roles).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nexus_events.contract import run_access, subjects
from nexus_events.contract.streams import TRANSCRIPTS
from nexus_events.errors import DecodeError
from nexus_events.events.runs import Condensation
from nexus_events.events.transcripts import TranscriptEntry
from nexus_events.transport.bus import Bus, decode_msg

from nexus_runner.errors import RunnerError
from nexus_runner.publisher import RunPublisher


class ResumeFailedError(RunnerError):
    """The run cannot be restored exactly (transcript or checkpoint missing or corrupt)."""


class TranscriptWriter(RunPublisher):
    """Writes attempt `attempt`'s entries from index `start`, pipelined like run events (the
    acks are collected as later entries go out); `flush` before each model call makes the
    entries it sends durable. Ids ``<run_id>:<attempt>:t:<index>`` make a resend a duplicate.

    `guard` is called before each write and raises to stop one (a superseded runner must not
    write past the point a newer attempt resumed from).
    """

    def __init__(
        self,
        bus: Bus,
        run_id: str,
        attempt: int,
        start: int = 0,
        guard: Callable[[], None] | None = None,
    ) -> None:
        # No secrets: the entries must be the very bytes the model was sent.
        super().__init__(bus, run_id, attempt)
        self.next_index = start
        self.written = 0
        self._guard = guard or (lambda: None)
        self._subject = subjects.run_transcript(run_id)

    async def message(self, message: dict[str, Any], inbox_seq: int | None = None) -> None:
        await self._write(
            TranscriptEntry(
                attempt=self.attempt,
                index=self.next_index,
                op="message",
                message=message,
                inbox_seq=inbox_seq,
            )
        )

    async def condense(self, condensation: Condensation) -> None:
        await self._write(
            TranscriptEntry(
                attempt=self.attempt,
                index=self.next_index,
                op="condense",
                condensation=condensation,
            )
        )

    async def _write(self, entry: TranscriptEntry) -> None:
        self._guard()
        msg_id = f"{self.run_id}:{self.attempt}:t:{entry.index}"
        await self._send(self._encode(self._subject, entry, msg_id))
        self.next_index += 1
        self.written += 1


@dataclass
class Folded:
    """A run's transcript folded: the messages of its next model call."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    entries: int = 0  # the index the next attempt writes from
    injected: set[int] = field(default_factory=set)  # NEXUS_INBOX sequences already sent


def _ranges(starts: Mapping[int, int]) -> dict[int, tuple[int, float]]:
    """For each attempt that may hold entries: [entries_m, entries_{next resumed attempt})."""
    begins = {1: 0, **starts}
    ordered = sorted(begins)
    out: dict[int, tuple[int, float]] = {}
    for i, attempt in enumerate(ordered):
        later = [begins[a] for a in ordered[i + 1 :]]
        out[attempt] = (begins[attempt], min(later) if later else float("inf"))
    return out


def kept_entries(
    entries: Iterable[TranscriptEntry], starts: Mapping[int, int]
) -> list[TranscriptEntry]:
    """A run's entries (in stream order) that count, by index, given where each resumed
    attempt began (`starts`: attempt -> its ``resumed.entries``). Attempt m's entries count
    only in ``[entries_m, entries_{m+1})``; anything else an attempt wrote is void. A gap, an
    entry of an attempt that never resumed, or two different entries at one index raises
    `ResumeFailedError`."""
    ranges = _ranges(starts)
    kept: dict[int, TranscriptEntry] = {}
    for entry in entries:
        span = ranges.get(entry.attempt)
        if span is None:
            raise ResumeFailedError(
                f"transcript entry {entry.index} of attempt {entry.attempt}, which never resumed"
            )
        if not span[0] <= entry.index < span[1]:
            continue  # void: a newer attempt resumed from before it
        known = kept.get(entry.index)
        if known is not None and known != entry:
            raise ResumeFailedError(f"transcript holds two different entries at {entry.index}")
        kept[entry.index] = entry
    out: list[TranscriptEntry] = []
    for index in range(len(kept)):
        if (item := kept.get(index)) is None:
            raise ResumeFailedError(f"transcript has a gap at entry {index} ({len(kept)} entries)")
        out.append(item)
    return out


def apply_entry(messages: list[dict[str, Any]], entry: TranscriptEntry) -> list[dict[str, Any]]:
    """The messages after `entry`: a message appended, or a condensation applied (one that
    does not fit the messages raises `ResumeFailedError`)."""
    if entry.op == "message":
        assert entry.message is not None  # checked by TranscriptEntry
        return [*messages, entry.message]
    assert entry.condensation is not None
    try:
        return entry.condensation.apply(messages)
    except ValueError as exc:
        raise ResumeFailedError(f"transcript entry {entry.index}: {exc}") from exc


def fold(entries: Iterable[TranscriptEntry], starts: Mapping[int, int]) -> Folded:
    """Fold a run's entries (in stream order) given where each resumed attempt began: the
    messages of its next model call (`kept_entries` says which entries count)."""
    folded = Folded()
    for item in kept_entries(entries, starts):
        folded.messages = apply_entry(folded.messages, item)
        if item.op == "message" and item.inbox_seq is not None:
            folded.injected.add(item.inbox_seq)
        folded.entries += 1
    return folded


async def read_entries(
    bus: Bus, run_id: str, attempt: int = 1, consumer: run_access.RunConsumer | None = None
) -> list[TranscriptEntry]:
    """The run's transcript entries in stream order, read through `consumer` (default: the
    run's own transcript replay); one that does not decode is corruption
    (`ResumeFailedError`), never skipped."""
    out: list[TranscriptEntry] = []
    subject = subjects.run_transcript(run_id)
    name = (consumer or run_access.transcript_replay(run_id, attempt)).name
    async for msg in bus.replay_raw(TRANSCRIPTS, filter_subject=subject, name=name):
        try:
            event = decode_msg(msg).event
        except DecodeError as exc:
            seq = msg.metadata.sequence.stream
            raise ResumeFailedError(
                f"transcript entry at NEXUS_TRANSCRIPTS seq {seq}: {exc}"
            ) from exc
        if not isinstance(event, TranscriptEntry):
            raise ResumeFailedError(f"not a transcript entry on {subject}: {type(event).__name__}")
        out.append(event)
    return out
