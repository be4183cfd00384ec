"""Where an attempt starts from: the run's history, its control channel, its loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from nexus_events.errors import BusError
from nexus_events.events.runs import RunCheckpointed, RunConfig
from nexus_events.transport.bus import Bus

from nexus_runner.checkpoint import Checkpointer
from nexus_runner.config import RunnerSettings
from nexus_runner.control import RunControl, resume_points, start_points
from nexus_runner.lab.replaying import ReplayingLlm
from nexus_runner.lab.starting import LabStart
from nexus_runner.llm import ModelClient
from nexus_runner.loop import AgentLoop
from nexus_runner.output import TypedOutput
from nexus_runner.prompt import initial_messages
from nexus_runner.publisher import RunPublisher
from nexus_runner.resume import Resumption, pending_calls
from nexus_runner.tools.contained import ContainedRegistry
from nexus_runner.transcript import ResumeFailedError, TranscriptWriter

LoopParts = tuple[
    ModelClient, ContainedRegistry, RunControl, RunPublisher, TypedOutput | None, Checkpointer
]


async def read_resumption(
    config: RunConfig, bus: Bus
) -> tuple[Resumption | None, ResumeFailedError | None]:
    """For attempt 2 and later: what the run goes on from, or why it cannot (the run then
    fails resume_failed before any model call)."""
    if config.attempt <= 1:
        return None, None
    try:
        return await Resumption.read(bus, config.run_id, config.attempt), None
    except ResumeFailedError as exc:
        return None, exc
    except BusError as exc:
        return None, ResumeFailedError(f"the run's history cannot be read: {exc}")


async def started_control(config: RunConfig, bus: Bus, resumption: Resumption | None) -> RunControl:
    """The run's control channel, following from this attempt's start points."""
    if resumption is None or resumption.history.ended:
        control = RunControl(bus, config.run_id, config.attempt)
        await control.start(await start_points(bus, config.run_id, config.attempt))
        return control
    points, replies_before = await resume_points(bus)
    control = RunControl(
        bus,
        config.run_id,
        config.attempt,
        skip_inbox=frozenset(resumption.folded.injected),
        replies_before=replies_before,
    )
    await control.start(points)
    return control


async def make_loop(
    config: RunConfig,
    settings: RunnerSettings,
    parts: LoopParts,
    resumption: Resumption | None,
    note: str,
    *,
    lab: LabStart | None = None,
) -> AgentLoop:
    """The loop with its transcript: from the beginning (a fork's: from its source's turn),
    or (resuming) from the restored messages, after ``resumed`` is stored."""
    llm, tools, control, pub, typed, checkpointer = parts
    going_on = resumption is not None and not resumption.fresh
    start = resumption.folded.entries if resumption is not None and going_on else 0
    transcript = TranscriptWriter(
        pub.bus, config.run_id, config.attempt, start, guard=control.ensure_not_ended
    )
    if resumption is not None and going_on:
        messages = list(resumption.folded.messages)
    else:
        messages = initial_messages(config, note)
        messages = lab.first_messages(messages) if lab is not None else messages
    loop = AgentLoop(
        config,
        settings,
        llm,
        tools,
        control,
        pub,
        messages,
        typed,
        transcript=transcript,
        checkpointer=checkpointer,
        recorded=len(messages) if going_on else 0,
    )
    if resumption is not None:
        await _resumed(loop, resumption, checkpointer.restored, tools.idempotent)
    if lab is not None:
        # A fork's turns go on from its source's; a replay serves its recording from the
        # call after those made already.
        loop.usage.turns += lab.at_turn
        if isinstance(llm, ReplayingLlm):
            llm.calls = loop.usage.turns
    return loop


async def _resumed(
    loop: AgentLoop,
    resumption: Resumption,
    restored: RunCheckpointed | None,
    idempotent: Callable[[str], bool],
) -> None:
    """Carry the run's usage and plan mode over, judge the calls left open, and publish
    ``resumed`` (stored before this attempt writes any transcript entry: it says from which
    index its entries count)."""
    loop.usage = dataclasses.replace(resumption.usage)
    pending = []
    if not resumption.fresh:
        if resumption.history.plan_approved:
            loop.plan.active = False
        pending = pending_calls(loop.messages, idempotent, resumption.history.results)
        loop.pending = pending
    checkpoint = restored.commit if restored is not None else None
    await loop.pub.event(resumption.resumed(checkpoint, pending))
    await loop.pub.flush()
