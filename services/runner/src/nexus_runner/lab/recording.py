"""What a lab run reads of its source run: its events (prepared config, base commit, tool
calls, checkpoints, where its attempts resumed) and its transcript, folded into the list of
model calls it made (each call's exact request and the reply it got)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexus_events.contract import run_access
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.streams import RUNS
from nexus_events.errors import BusError
from nexus_events.events.runs import (
    Reason,
    RunCheckpointed,
    RunConfig,
    RunPrepared,
    RunResumed,
    RunStarted,
    RunTurn,
    ToolCalled,
)
from nexus_events.events.transcripts import TranscriptEntry
from nexus_events.transport.bus import Bus

from nexus_runner.errors import RunStopped
from nexus_runner.transcript import ResumeFailedError, apply_entry, kept_entries, read_entries


@dataclass(frozen=True)
class RecordedCall:
    """Model call `turn` of the source run: the messages it sent and the reply it got."""

    turn: int
    request: list[dict[str, Any]]
    reply: dict[str, Any]


@dataclass
class SourceRun:
    """What a lab run knows of its source run."""

    run_id: str
    config: RunConfig | None = None  # its latest `prepared` config
    base_commit: str | None = None
    turns: int = 0
    starts: dict[int, int] = field(default_factory=dict)  # attempt -> resumed.entries
    checkpoints: list[RunCheckpointed] = field(default_factory=list)
    called: list[ToolCalled] = field(default_factory=list)
    entries: list[TranscriptEntry] = field(default_factory=list)  # the ones that count
    calls: list[RecordedCall] = field(default_factory=list)

    def add(self, event: object) -> None:
        if isinstance(event, RunPrepared):
            self.config = event.config
        elif isinstance(event, RunStarted):
            self.base_commit = self.base_commit or event.base_commit
        elif isinstance(event, RunTurn):
            self.turns += 1
        elif isinstance(event, RunResumed):
            self.starts[event.attempt] = event.entries
        elif isinstance(event, RunCheckpointed):
            self.checkpoints.append(event)
        elif isinstance(event, ToolCalled):
            self.called.append(event)


def recorded_calls(entries: list[TranscriptEntry]) -> list[RecordedCall]:
    """The model calls a run's counted entries record: each assistant message is the reply to
    the messages before it (condensations applied where they were written)."""
    messages: list[dict[str, Any]] = []
    calls: list[RecordedCall] = []
    for entry in entries:
        message = entry.message if entry.op == "message" else None
        if message is not None and message.get("role") == "assistant":
            calls.append(RecordedCall(len(calls) + 1, list(messages), message))
        messages = apply_entry(messages, entry)
    return calls


def unusable(message: str) -> RunStopped:
    """How a lab run whose source cannot serve it ends: failed, before any model call."""
    return RunStopped(RunStatus.FAILED, Reason.LAB_SOURCE_UNUSABLE, message)


async def read_source(bus: Bus, run_id: str, attempt: int, source_run_id: str) -> SourceRun:
    """The source run's events and folded transcript, read through the lab run's named
    consumers; `RunStopped` (lab_source_unusable) when its transcript is gone or corrupt."""
    source = SourceRun(source_run_id)
    history = run_access.source_history_replay(run_id, attempt, source_run_id)
    transcript = run_access.source_transcript_replay(run_id, attempt, source_run_id)
    try:
        async for decoded in bus.replay(RUNS, run_id=source_run_id, name=history.name):
            source.add(decoded.event)
        raw = await read_entries(bus, source_run_id, consumer=transcript)
        source.entries = kept_entries(raw, source.starts)
        source.calls = recorded_calls(source.entries)
    except ResumeFailedError as exc:
        raise unusable(f"the transcript of run {source_run_id} cannot be read: {exc}") from exc
    except BusError as exc:
        raise unusable(f"run {source_run_id} cannot be read: {exc}") from exc
    if not source.calls:
        raise unusable(f"the transcript of run {source_run_id} has expired or was never written")
    return source


__all__ = ["RecordedCall", "SourceRun", "read_source", "recorded_calls", "unusable"]
