"""How a lab run starts (docs/lab.md): its source read before any model call, a replay's
model client over the recording, a fork's first messages, workspace and usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexus_events.events.lab_specs import LabMode
from nexus_events.events.runs import RunCheckpointed, RunConfig
from nexus_events.transport.bus import Bus

from nexus_runner.checkpoint import Checkpointer
from nexus_runner.lab.forking import fork_checkpoint, fork_messages
from nexus_runner.lab.normalising import Normaliser
from nexus_runner.lab.recording import SourceRun, read_source, unusable
from nexus_runner.lab.replaying import ReplayingLlm
from nexus_runner.llm import LlmClient, ModelClient
from nexus_runner.publisher import RunPublisher
from nexus_runner.transcript import ResumeFailedError


@dataclass
class LabStart:
    """What a lab run takes from its source; a fork's `messages` and `checkpoint` too."""

    config: RunConfig
    source: SourceRun
    at_turn: int = 0  # a fork's turns kept of the source (its usage starts there)
    messages: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: RunCheckpointed | None = None

    @property
    def source_run_id(self) -> str:
        return self.source.run_id

    def model_client(self, live: LlmClient, workspace: str, pub: RunPublisher) -> ModelClient:
        """A replay's client over the recording; a fork talks to the live model."""
        assert self.config.lab is not None
        if self.config.lab.mode is not LabMode.REPLAY:
            return live
        normaliser = Normaliser(self.config.run_id, self.source.run_id, workspace)
        return ReplayingLlm(live, self.source, self.config, normaliser, pub)

    def first_messages(self, built: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The run's first messages: a fork's (the source's up to its turn, then the input),
        else those `initial_messages` built."""
        assert self.config.lab is not None
        if self.config.lab.mode is not LabMode.FORK:
            return built
        extra = self.config.lab.input
        return [*self.messages, *([{"role": "user", "content": extra}] if extra else [])]


async def restore_source_checkpoint(checkpointer: Checkpointer, start: LabStart) -> None:
    """A fork's workspace: its source's checkpoint at its turn, restored and checked as a
    resume restores its own; one that cannot be is the source's fault (lab_source_unusable)."""
    assert start.checkpoint is not None
    try:
        await checkpointer.restore(start.checkpoint, source_run_id=start.source_run_id)
    except ResumeFailedError as exc:
        raise unusable(f"run {start.source_run_id}'s workspace cannot be restored: {exc}") from exc


async def lab_start(config: RunConfig, bus: Bus) -> LabStart | None:
    """The source of a lab run, read and checked before anything else (`RunStopped`,
    lab_source_unusable, when it cannot serve); None for a run that is not one."""
    lab = config.lab
    if lab is None:
        return None
    source = await read_source(bus, config.run_id, config.attempt, lab.source_run_id)
    start = LabStart(config, source)
    if lab.mode is LabMode.FORK:
        assert lab.at_turn is not None  # LabSpec checks a fork has one
        start.at_turn = lab.at_turn
        start.messages = fork_messages(source, lab.at_turn)
        start.checkpoint = fork_checkpoint(source, lab.at_turn)
    return start


__all__ = ["LabStart", "lab_start", "restore_source_checkpoint"]
