"""The lifecycle of one run: start, watchdogs beside the loop, the finishing, the one ending.

`execute_run` guarantees exactly one terminal event (completed, failed or cancelled) unless
the bus itself is gone, or someone else (the scheduler: lost, timed_out) ended the run first:
then the runner stops, does nothing more in the run's name (no commit, push or pull request)
and publishes no ending of its own. Stops from outside (cancel_requested, SIGTERM, the
wall-clock budget) cancel the loop task, which aborts an in-flight model stream and kills a
running shell command's process group.

Events go out pipelined (`RunPublisher`); every one is stored before the finishing side
effects (commit, push, pull request) and before the terminal event, which comes last. A run
some of whose events cannot be stored ends ``failed`` (``runner_error``).

Attempt 2 and later of a run whose runner died go on from where it was (docs/resume.md):
`nexus_runner.resume` reads the run's history and folds its transcript before anything else,
the workspace is restored from the last checkpoint after the clone, ``resumed`` is stored,
and the loop goes on with the same messages; budgets and the wall clock count from the run's
first start. What cannot be restored exactly ends the run ``failed`` (``resume_failed``)
before any model call. A runner that sees a newer attempt start (``resuming``) stops like one
whose run was ended elsewhere.

A lab run (docs/lab.md) reads its source run first (`nexus_runner.lab`): a replay's model
calls are served from the recording until the first divergence; a fork starts from its
source's conversation and checkpoint at a turn. ``started`` comes after the clone and names
its commit (``base_commit``); heartbeats beat from the start, so a long clone is not taken
for a runner that never started (the scheduler's start timeout ends at a first beat too).

The run is one span tree (`nexus_runner.tracing`): its root ``nexus run <run_id>`` continues
the trace the caller passes (the scheduler's, via ``TRACEPARENT``), and every event the run
publishes, heartbeats included, is inside it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import socket
from pathlib import Path

from nexus_events.contract.streams import RUNS
from nexus_events.errors import BusError
from nexus_events.events.runs import (
    RunCompleted,
    RunConfig,
    RunFailed,
    RunResult,
    RunSleeping,
    RunStarted,
    TerminalEvent,
)
from nexus_events.runtime import telemetry
from nexus_events.runtime.clock import SYSTEM_CLOCK, SleepingClock
from nexus_events.runtime.logs import bind
from nexus_events.transport.bus import Bus
from opentelemetry import context as otel_context

from nexus_runner.checkpoint import Checkpointer
from nexus_runner.config import RunnerSettings
from nexus_runner.context import RunContext
from nexus_runner.dependencies import (
    default_provider,
    llm_client,
    openai_client,
    prepare_workspace,
    run_secrets,
    runner_urls,
    sandbox_approval,
    spend_gate,
    tool_context,
    tool_sandbox,
)
from nexus_runner.egress import record_safely, run_egress
from nexus_runner.errors import RunnerError
from nexus_runner.finishing import finish_run
from nexus_runner.git import Author, Git
from nexus_runner.lab.starting import lab_start, restore_source_checkpoint
from nexus_runner.loop import AgentLoop
from nexus_runner.output import TypedOutput
from nexus_runner.plan import plan_result
from nexus_runner.provider import GitProvider
from nexus_runner.publisher import RunPublisher
from nexus_runner.resuming import make_loop, read_resumption, started_control
from nexus_runner.sleeping import fall_asleep
from nexus_runner.terminal import terminal_of, unrecorded
from nexus_runner.tools.contained import ContainedRegistry
from nexus_runner.tools.mcp import McpTools
from nexus_runner.tools.sleep import SleepPlan
from nexus_runner.tracing import record_terminal, run_span
from nexus_runner.watchdogs import RunHandle, heartbeats, wall_clock, watch_cancel, watch_ended
from nexus_runner.workspace import Workspace

__all__ = ["RUNNER_VERSION", "RunHandle", "execute_run", "load_prepared_from_bus", "serve_run"]

log = logging.getLogger(__name__)

RUNNER_VERSION = "0.1.0"


async def load_prepared_from_bus(
    bus: Bus, run_id: str
) -> tuple[RunConfig, otel_context.Context | None]:
    """The config of the run's latest ``prepared`` event and the trace context it carries."""
    from nexus_events.events.runs import RunPrepared

    found: RunConfig | None = None
    headers: dict[str, str] = {}
    async for decoded in bus.replay(RUNS, run_id=run_id):
        if isinstance(decoded.event, RunPrepared):
            found = decoded.event.config
            env = decoded.envelope
            headers = telemetry.envelope_headers(env.traceparent, env.tracestate)
    if found is None:
        raise RunnerError(f"no prepared event for run {run_id}")
    return found, telemetry.extract(headers) if headers else None


async def serve_run(
    config: RunConfig,
    settings: RunnerSettings,
    bus: Bus,
    *,
    trace_context: otel_context.Context | None,
    workspace_dir: Path | None = None,
) -> int:
    """A runner process's one run (cold or warm): its log lines name it, SIGTERM stops it;
    the process's exit code, 0 when it completed or ended the attempt to sleep."""
    bind(run_id=config.run_id, agent_id=config.agent_id)  # on every log line of the run
    handle = RunHandle()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, handle.terminate)
    terminal = await execute_run(
        config, settings, bus, handle=handle, workspace_dir=workspace_dir,
        trace_context=trace_context,
    )  # fmt: skip
    return 0 if isinstance(terminal, (RunCompleted, RunSleeping)) else 1


async def execute_run(
    config: RunConfig,
    settings: RunnerSettings,
    bus: Bus,
    *,
    handle: RunHandle | None = None,
    provider: GitProvider | None = None,
    workspace_dir: Path | None = None,
    trace_context: otel_context.Context | None = None,
    clock: SleepingClock = SYSTEM_CLOCK,
) -> TerminalEvent | RunSleeping:
    """Run `config` to its end and publish the terminal event; return it. An attempt that
    ends to sleep publishes ``sleeping`` and no terminal event, and returns that.

    All of it happens in the run's span, a child of `trace_context` (default: the current
    context). `clock` is what the heartbeats and the wall-clock budget read and wait on.
    """
    with run_span(config, trace_context) as span:
        terminal = await _execute_run(
            config,
            settings,
            bus,
            handle=handle or RunHandle(),
            provider=provider,
            workspace_dir=workspace_dir,
            clock=clock,
        )
        record_terminal(span, terminal)
        return terminal


async def _execute_run(  # noqa: PLR0915 - one run's lifecycle, read top to bottom
    config: RunConfig,
    settings: RunnerSettings,
    bus: Bus,
    *,
    handle: RunHandle,
    provider: GitProvider | None,
    workspace_dir: Path | None,
    clock: SleepingClock,
) -> TerminalEvent | RunSleeping:
    pub = RunPublisher(bus, config.run_id, config.attempt, secrets=run_secrets(config, settings))
    resumption, resume_error = await read_resumption(config, bus)
    control = await started_control(config, bus, resumption)
    handle.control = control
    wall = float(config.budgets.max_wall_seconds)
    if resumption is not None:
        wall = resumption.remaining_wall(wall, clock.now())  # the deadline carries over
    root = workspace_dir or settings.workspace_root / config.run_id
    branch = (config.repo.branch if config.repo else None) or f"nexus/{config.run_id}"
    git = Git(root, Author(settings.git_author_name, settings.git_author_email), pub.secrets)
    provider = provider or default_provider(config, settings)
    loop_ref: list[AgentLoop | None] = [None]
    done = asyncio.Event()
    announced: list[RunStarted] = []

    async def announce(base_commit: str | None) -> None:
        """``started``, once: after the clone (it names the commit the workspace started
        from), or before the ending of a run that never got that far."""
        if announced:
            return
        announced.append(
            RunStarted(
                runner=socket.gethostname(),
                runner_version=RUNNER_VERSION,
                base_commit=base_commit,
            )
        )
        await pub.event(announced[0])

    background = [
        asyncio.create_task(
            heartbeats(pub.event, settings.heartbeat_interval, loop_ref, done, clock)
        ),
        asyncio.create_task(watch_cancel(control, handle)),
        asyncio.create_task(watch_ended(control, handle, done)),
        asyncio.create_task(wall_clock(wall, config.budgets.max_wall_seconds, handle, clock)),
    ]
    client = openai_client(config, settings)

    checkpointer: Checkpointer | None = None

    async def work() -> RunResult | RunSleeping:
        nonlocal checkpointer
        if resume_error is not None:  # before any model call: never from a wrong state
            raise resume_error
        # Before the clone: an output_schema that is not a JSON Schema fails the run at once.
        typed = TypedOutput.of(config.output_schema, settings.output_retries)
        # A lab run's source, read and checked before the clone and any model call.
        lab = await lab_start(config, bus)
        base_sha, base_branch = await prepare_workspace(config, settings, git, branch)
        await announce(base_sha)
        sandbox = await asyncio.to_thread(tool_sandbox, settings)
        ctx = tool_context(
            config,
            settings,
            bus,
            control,
            Workspace(root),
            git,
            pub.secrets,
            approve=sandbox_approval(loop_ref),
            sandbox=sandbox,
        )
        ctx.clock = clock  # what `sleep` reads the time from
        checkpointer = Checkpointer(
            git, bus.js, pub, base_sha=base_sha, guard=control.ensure_not_ended
        )
        if resumption is not None and not resumption.fresh and resumption.history.checkpoint:
            await checkpointer.restore(resumption.history.checkpoint)
        elif lab is not None and lab.checkpoint is not None:
            await restore_source_checkpoint(checkpointer, lab)
        await checkpointer.start()
        ctx.record_egress = functools.partial(record_safely, pub.event)
        # The tools' egress proxy (only with grants) lives as long as the loop, and starts
        # before the MCP servers, whose sandbox reaches the network only through it. MCP
        # servers live as long as the loop: closing kills their process groups, also when
        # the run is cancelled.
        async with (
            run_egress(
                config,
                runner_urls=runner_urls(config, settings, bus),
                secrets=pub.secrets,
                record=pub.event,
            ) as ctx.egress,
            McpTools.started(
                list(config.mcp_servers),
                settings,
                ctx.workspace.root,
                pub.log,
                pub.event,
                sandbox=sandbox,
            ) as mcp,
        ):
            tools = ContainedRegistry(
                list(config.tools),
                config.permissions,
                ctx,
                mcp,
                config.hooks,
                sandbox_tools=list(config.sandbox_tools),
            )
            gate = spend_gate(settings, bus, control, pub, loop_ref, clock)
            live = llm_client(config, settings, client, gate)
            llm = live if lab is None else lab.model_client(live, str(root), pub)
            note = " ".join([f"You work in a git checkout on branch {branch}.", *mcp.notes])
            loop = await make_loop(
                config,
                settings,
                (llm, tools, control, pub, typed, checkpointer),
                resumption,
                note,
                lab=lab,
            )
            # A chat conversation's run keeps what was said and the new message (system + them).
            head = 1 + len(config.conversation) + 1 if config.conversation else 0
            loop.context = RunContext.of(
                config.model, settings, client, live.retry, gate, head_messages=head
            )
            loop.clock = clock
            loop_ref[0] = loop
            try:
                finished = await loop.run()
            finally:
                _note_transcript_cost(config.run_id, loop)
            if isinstance(finished, SleepPlan):
                return await fall_asleep(loop, finished, done)  # no finishing, no ending
            loop.phase = "finishing"
            # No commit, push or pull request unless the run's record so far is stored, nor
            # once the run was ended by someone else.
            await pub.flush()
            control.ensure_not_ended()
            # A plan not approved: nothing was written (only read tools were offered), so no
            # acceptance tests, commit or push; the plan is the result.
            result = (
                plan_result(plan)
                if (plan := loop.plan.ended) is not None
                else await finish_run(
                    config,
                    settings,
                    ctx,
                    finished,
                    branch=branch,
                    base_sha=base_sha,
                    base_branch=base_branch,
                    provider=provider,
                    guard=control.ensure_not_ended,
                )
            )
            return result.model_copy(update={"turns": loop.usage.turns})

    task: asyncio.Task[RunResult | RunSleeping] = asyncio.create_task(
        work(), name=f"run:{config.run_id}"
    )
    handle.task = task
    if handle.stop_reason is not None:
        task.cancel()
    try:
        await asyncio.wait({task})
        if (slept := _slept(task)) is not None:
            log.info(
                "run %s: attempt %d sleeps until %s", config.run_id, config.attempt, slept.until
            )
            return slept  # `sleeping` is stored; watchdogs stop below, no terminal event
        terminal = terminal_of(task, handle, loop_ref[0])
    finally:
        done.set()
        for t in background:
            t.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await control.stop()
        await client.close()
        if checkpointer is not None:
            checkpointer.close()
    if control.superseded is None and control.ended is None:
        await announce(None)  # a run that ended before its clone: started, then its ending
    if (newer := control.superseded) is not None:
        # A newer attempt goes on with the run: this one publishes nothing more, no ending.
        log.warning("run %s: superseded by attempt %d, no ending", config.run_id, newer.attempt)
        return RunFailed(reason=newer.reason, message=f"superseded by attempt {newer.attempt}")
    try:
        await pub.flush()
    except BusError as exc:
        log.warning("run %s: events could not be stored: %s", config.run_id, exc)
        terminal = unrecorded(terminal, exc)
    if control.ended is not None:
        # Terminal is final: a second ending would contradict the one already published.
        log.warning(
            "run %s: not publishing %s, the run was already %s",
            config.run_id,
            terminal.event_name,
            control.ended.event_name,
        )
        return control.ended
    await pub.terminal(terminal)
    return terminal


def _slept(task: asyncio.Task[RunResult | RunSleeping]) -> RunSleeping | None:
    if task.cancelled() or task.exception() is not None:
        return None
    result = task.result()
    return result if isinstance(result, RunSleeping) else None


def _note_transcript_cost(run_id: str, loop: AgentLoop) -> None:
    transcript = loop.transcript
    if transcript is not None and transcript.written:
        log.info(
            "run %s: transcript %d entries, %.1f ms waited for their acks before model calls",
            run_id,
            transcript.written,
            loop.transcript_wait * 1000,
        )
