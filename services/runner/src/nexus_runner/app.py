"""Wiring and lifecycle of one run: workspace, control channel, heartbeats, the loop, the end.

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

The run is one span tree (`nexus_runner.tracing`): its root ``nexus run <run_id>`` continues
the trace the caller passes (the scheduler's, via ``TRACEPARENT``), and every event the run
publishes, heartbeats included, is inside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexus_events import telemetry
from nexus_events.bus import Bus
from nexus_events.errors import BusError
from nexus_events.events.runs import (
    Reason,
    RunCancelled,
    RunCheckpointed,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunHeartbeat,
    RunResult,
    RunStarted,
    TerminalEvent,
)
from nexus_events.runstate import RunStatus
from nexus_events.streams import RUNS
from openai import AsyncOpenAI
from opentelemetry import context as otel_context

from nexus_runner.checkpoint import Checkpointer
from nexus_runner.config import RunnerSettings
from nexus_runner.containment import track_runner, track_workspace
from nexus_runner.context import RunContext
from nexus_runner.control import RunControl, resume_points, start_points
from nexus_runner.delegation import Delegation
from nexus_runner.egress import record_safely, run_egress
from nexus_runner.errors import RunnerError, RunStopped, ToolError
from nexus_runner.finishing import configured_test_command, finish_run
from nexus_runner.git import Author, Git
from nexus_runner.leftovers import clear_workspace
from nexus_runner.llm import LlmClient, RetryPolicy
from nexus_runner.loop import AgentLoop
from nexus_runner.output import TypedOutput
from nexus_runner.plan import not_approved_message, plan_result
from nexus_runner.prompt import initial_messages
from nexus_runner.provider import GitHubProvider, GitProvider
from nexus_runner.publisher import RunPublisher
from nexus_runner.resume import Resumption, pending_calls
from nexus_runner.safety import SecretRegistry
from nexus_runner.sandbox import StateCap
from nexus_runner.tool_sandbox import UNSANDBOXED, ToolSandbox
from nexus_runner.tools import ToolContext
from nexus_runner.tools.contained import ContainedRegistry
from nexus_runner.tools.mcp import McpTools
from nexus_runner.tools.memory import RunMemory, RunScopes
from nexus_runner.tracing import record_terminal, run_span
from nexus_runner.transcript import ResumeFailedError, TranscriptWriter
from nexus_runner.workspace import Workspace

log = logging.getLogger(__name__)

RUNNER_VERSION = "0.1.0"


@dataclass
class RunHandle:
    """Ways to stop a running run from outside (signal handlers, tests)."""

    stop_reason: RunStopped | None = None
    task: asyncio.Task[RunResult] | None = None
    control: RunControl | None = None

    def stop(self, reason: RunStopped) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.task is not None:
            self.task.cancel()

    def terminate(self) -> None:
        self.stop(RunStopped(RunStatus.CANCELLED, Reason.TERMINATED, "the runner received SIGTERM"))


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


async def prepare_workspace(
    config: RunConfig, settings: RunnerSettings, git: Git, branch: str
) -> tuple[str | None, str | None]:
    """Clone the repo (or init an empty one); return (base sha, base branch).

    Attempt 2 and later first clear what the dead attempt left at the workspace path (its
    clone, files its tools wrote before any checkpoint): the new attempt starts from a clean
    clone, then its last checkpoint if there is one (docs/resume.md)."""
    root = git.root
    if config.attempt > 1:
        try:
            await asyncio.to_thread(clear_workspace, root)
        except (OSError, RecursionError) as exc:  # deeper than rmtree walks: unclearable
            raise RunnerError(f"workspace {root} left by attempt {config.attempt - 1}"
                              f" cannot be cleared: {exc}") from exc  # fmt: skip
    if config.repo is None:
        root.mkdir(parents=True, exist_ok=True)
        await git.run("init", "--quiet", "-b", branch)
        return None, None
    if root.exists() and any(root.iterdir()):
        raise RunnerError(f"workspace {root} is not empty")
    base_sha = await git.clone(config.repo.url, config.repo.ref, branch, settings.git_remote)
    track_workspace(git.secrets, root)  # its `.env`-like files, before the agent reads them
    base_branch = config.repo.ref
    if base_branch is None:
        remote_head = f"refs/remotes/{settings.git_remote}/HEAD"
        head = await git.run("symbolic-ref", "--short", remote_head, check=False)
        prefix = f"{settings.git_remote}/"
        base_branch = head.output.strip().removeprefix(prefix) if head.ok else "main"
    return base_sha, base_branch


async def _heartbeats(
    pub: RunPublisher, interval: float, loop_ref: list[AgentLoop | None], done: asyncio.Event
) -> None:
    # `done` as well as cancellation: on Python 3.11 a cancel that lands while nats-py's
    # publish (asyncio.wait_for) is completing can be swallowed, and the loop would go on.
    seq = 0
    while not done.is_set():
        await asyncio.sleep(interval)
        if done.is_set():
            return
        seq += 1
        current = loop_ref[0]
        turn = current.usage.turns if current else 0
        phase = current.phase if current else "preparing"
        with contextlib.suppress(RunnerError, OSError):
            await pub.event(RunHeartbeat(seq=seq, turn=turn, phase=phase))


async def _watch_cancel(control: RunControl, handle: RunHandle) -> None:
    await control.cancelled.wait()
    cancel = control.cancel
    assert cancel is not None
    handle.stop(
        RunStopped(
            RunStatus.CANCELLED, cancel.reason, "cancel requested", {"by": cancel.requested_by}
        )
    )


async def _watch_ended(control: RunControl, handle: RunHandle) -> None:
    await control.ended_elsewhere.wait()
    if (newer := control.superseded) is not None:
        message = f"superseded by attempt {newer.attempt} of the run"
        handle.stop(RunStopped(RunStatus.FAILED, newer.reason, message))
        return
    ended = control.ended
    assert ended is not None
    handle.stop(
        RunStopped(RunStatus.FAILED, ended.reason, f"the run was already ended {ended.event_name}")
    )


async def _wall_clock(remaining: float, seconds: float, handle: RunHandle) -> None:
    await asyncio.sleep(max(remaining, 0.0))
    handle.stop(
        RunStopped(
            RunStatus.FAILED,
            Reason.BUDGET_EXCEEDED,
            f"budget max_wall_seconds exceeded (limit {seconds:g})",
            {"budget": "max_wall_seconds", "limit": seconds},
        )
    )


async def execute_run(
    config: RunConfig,
    settings: RunnerSettings,
    bus: Bus,
    *,
    handle: RunHandle | None = None,
    provider: GitProvider | None = None,
    workspace_dir: Path | None = None,
    trace_context: otel_context.Context | None = None,
) -> TerminalEvent:
    """Run `config` to its end and publish the terminal event; return it.

    All of it happens in the run's span, a child of `trace_context` (default: the current
    context).
    """
    with run_span(config, trace_context) as span:
        terminal = await _execute_run(
            config,
            settings,
            bus,
            handle=handle or RunHandle(),
            provider=provider,
            workspace_dir=workspace_dir,
        )
        record_terminal(span, terminal)
        return terminal


def _tool_home(root: Path) -> Path:
    """A HOME of the run's own for its shell commands, beside the workspace."""
    home = root.parent / f"{root.name}.home"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


def _run_secrets(config: RunConfig, settings: RunnerSettings) -> SecretRegistry:
    """The run's secret values, to start with its own settings and environment (then the
    workspace's `.env`-like files once cloned, what it reads outside the workspace as it
    works): redacted from every event and log line, tool output, commit and push."""
    secrets = SecretRegistry()
    repo = config.repo
    secrets.allow(
        config.run_id,
        config.agent_id,
        config.task_id,
        *((repo.url, repo.ref, repo.branch) if repo else ()),
        str(settings.workspace_root),
        str(settings.workspace_root / config.run_id),
    )
    track_runner(secrets, settings)
    return secrets


def _tool_context(  # noqa: PLR0917
    config: RunConfig,
    settings: RunnerSettings,
    bus: Bus,
    control: RunControl,
    ws: Workspace,
    git: Git,
    secrets: SecretRegistry,
    approve: Callable[[str, str], Coroutine[Any, Any, bool]] | None = None,
    sandbox: ToolSandbox = UNSANDBOXED,
) -> ToolContext:
    """What the run's tools act on, in the cloned workspace."""
    return ToolContext(
        workspace=ws,
        git=Git(ws.root, git.author, secrets),
        shell_timeout=settings.shell_timeout,
        output_cap=settings.output_cap,
        # Chosen before the agent runs: it cannot add a Makefile to pick another.
        test_command=configured_test_command(config, settings, ws.root),
        secrets=secrets,
        home=_tool_home(ws.root),
        memory=RunMemory(
            bus.nc, config.run_id, RunScopes.of(config), timeout=settings.remember_timeout
        ),
        delegate=Delegation(
            bus,
            control,
            run_id=config.run_id,
            agent_id=config.agent_id,
            task_id=config.task_id,
        ),
        approve=approve,
        state_cap=StateCap(settings.sandbox_state_max_keys, settings.sandbox_state_max_bytes),
        sandbox=sandbox,
    )


def _tool_sandbox(settings: RunnerSettings) -> ToolSandbox:
    """Decide (probing bwrap once) where the agent's commands run: never binding in the
    runner's cwd (its run dir), its HOME, nor the workspace root (other runs)."""
    return ToolSandbox.detect(
        settings.tool_sandbox,
        allow=settings.tool_sandbox_readable,
        forbidden=[Path.cwd(), Path.home()],
        private=[settings.workspace_root],
    )


def _runner_urls(config: RunConfig, settings: RunnerSettings, bus: Bus) -> list[str | None]:
    """The runner's own endpoints, which the tools' egress never reaches: the model, NATS."""
    return [config.model.base_url or settings.llm_base_url, *bus.settings.url.split(",")]


def _default_provider(config: RunConfig, settings: RunnerSettings) -> GitProvider | None:
    if settings.github_token is None or not config.permissions.can_open_pr:
        return None
    return GitHubProvider(
        settings.github_token.get_secret_value(),
        settings.github_api_url,
        repository=settings.github_repository,
    )


def _llm_client(config: RunConfig, settings: RunnerSettings, client: AsyncOpenAI) -> LlmClient:
    return LlmClient(
        client,
        config.model.name,
        temperature=config.model.temperature,
        max_output_tokens=config.model.max_output_tokens,
        retry=RetryPolicy(
            settings.llm_max_attempts, settings.retry_base_delay, settings.retry_max_delay
        ),
        stream=settings.stream,
    )


def _sandbox_approval(
    loop_ref: list[AgentLoop | None],
) -> Callable[[str, str], Coroutine[Any, Any, bool]]:
    """A sandboxed tool's `nexus.approve(reason)`: the run's own approval request, asked by
    the loop running the tool (it exists before any tool runs)."""

    async def approve(tool: str, reason: str) -> bool:
        loop = loop_ref[0]
        if loop is None:
            return False
        asked = await loop._ask(tool, f"{tool} (sandboxed tool) asks: {reason}", reason)
        return asked[1] == "approved"

    return approve


async def _execute_run(  # noqa: PLR0915 - one run's lifecycle, read top to bottom
    config: RunConfig,
    settings: RunnerSettings,
    bus: Bus,
    *,
    handle: RunHandle,
    provider: GitProvider | None,
    workspace_dir: Path | None,
) -> TerminalEvent:
    pub = RunPublisher(bus, config.run_id, config.attempt, secrets=_run_secrets(config, settings))
    resumption, resume_error = await _read_resumption(config, bus)
    control = await _started_control(config, bus, resumption)
    handle.control = control
    wall = float(config.budgets.max_wall_seconds)
    if resumption is not None:
        wall = resumption.remaining_wall(wall)  # the deadline carries over
    root = workspace_dir or settings.workspace_root / config.run_id
    branch = (config.repo.branch if config.repo else None) or f"nexus/{config.run_id}"
    git = Git(root, Author(settings.git_author_name, settings.git_author_email), pub.secrets)
    provider = provider or _default_provider(config, settings)
    loop_ref: list[AgentLoop | None] = [None]
    await pub.event(RunStarted(runner=socket.gethostname(), runner_version=RUNNER_VERSION))
    done = asyncio.Event()
    background = [
        asyncio.create_task(_heartbeats(pub, settings.heartbeat_interval, loop_ref, done)),
        asyncio.create_task(_watch_cancel(control, handle)),
        asyncio.create_task(_watch_ended(control, handle)),
        asyncio.create_task(_wall_clock(wall, config.budgets.max_wall_seconds, handle)),
    ]
    client = AsyncOpenAI(
        api_key=settings.llm_api_key,
        base_url=config.model.base_url or settings.llm_base_url,
        timeout=settings.llm_timeout,
        max_retries=0,  # retries are ours: they honour Retry-After and end as llm_unavailable
    )

    checkpointer: Checkpointer | None = None

    async def work() -> RunResult:
        nonlocal checkpointer
        if resume_error is not None:  # before any model call: never from a wrong state
            raise resume_error
        # Before the clone: an output_schema that is not a JSON Schema fails the run at once.
        typed = TypedOutput.of(config.output_schema, settings.output_retries)
        base_sha, base_branch = await prepare_workspace(config, settings, git, branch)
        sandbox = await asyncio.to_thread(_tool_sandbox, settings)
        ctx = _tool_context(
            config,
            settings,
            bus,
            control,
            Workspace(root),
            git,
            pub.secrets,
            approve=_sandbox_approval(loop_ref),
            sandbox=sandbox,
        )
        checkpointer = Checkpointer(
            git, bus.js, pub, base_sha=base_sha, guard=control.ensure_not_ended
        )
        if resumption is not None and not resumption.fresh and resumption.history.checkpoint:
            await checkpointer.restore(resumption.history.checkpoint)
        await checkpointer.start()
        ctx.record_egress = functools.partial(record_safely, pub.event)
        # The tools' egress proxy (only with grants) lives as long as the loop, and starts
        # before the MCP servers, whose sandbox reaches the network only through it. MCP
        # servers live as long as the loop: closing kills their process groups, also when
        # the run is cancelled.
        async with (
            run_egress(
                config,
                runner_urls=_runner_urls(config, settings, bus),
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
            llm = _llm_client(config, settings, client)
            note = " ".join([f"You work in a git checkout on branch {branch}.", *mcp.notes])
            loop = await _make_loop(
                config, settings, (llm, tools, control, pub, typed, checkpointer), resumption, note
            )
            loop.context = RunContext.of(config.model, settings, client, llm.retry)
            loop_ref[0] = loop
            try:
                finished = await loop.run()
            finally:
                _note_transcript_cost(config.run_id, loop)
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

    task: asyncio.Task[RunResult] = asyncio.create_task(work(), name=f"run:{config.run_id}")
    handle.task = task
    if handle.stop_reason is not None:
        task.cancel()
    try:
        await asyncio.wait({task})
        terminal = _terminal(task, handle, loop_ref[0])
    finally:
        done.set()
        for t in background:
            t.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await control.stop()
        await client.close()
        if checkpointer is not None:
            checkpointer.close()
    if (newer := control.superseded) is not None:
        # A newer attempt goes on with the run: this one publishes nothing more, no ending.
        log.warning("run %s: superseded by attempt %d, no ending", config.run_id, newer.attempt)
        return RunFailed(reason=newer.reason, message=f"superseded by attempt {newer.attempt}")
    try:
        await pub.flush()
    except BusError as exc:
        log.warning("run %s: events could not be stored: %s", config.run_id, exc)
        terminal = _unrecorded(terminal, exc)
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


async def _read_resumption(
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


async def _make_loop(
    config: RunConfig,
    settings: RunnerSettings,
    parts: tuple[
        LlmClient, ContainedRegistry, RunControl, RunPublisher, TypedOutput | None, Checkpointer
    ],
    resumption: Resumption | None,
    note: str,
) -> AgentLoop:
    """The loop with its transcript: from the beginning, or (resuming) from the restored
    messages, after ``resumed`` is stored."""
    llm, tools, control, pub, typed, checkpointer = parts
    going_on = resumption is not None and not resumption.fresh
    start = resumption.folded.entries if resumption is not None and going_on else 0
    transcript = TranscriptWriter(
        pub.bus, config.run_id, config.attempt, start, guard=control.ensure_not_ended
    )
    messages = (
        list(resumption.folded.messages)
        if resumption is not None and going_on
        else initial_messages(config, note)
    )
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
    return loop


async def _started_control(
    config: RunConfig, bus: Bus, resumption: Resumption | None
) -> RunControl:
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


def _note_transcript_cost(run_id: str, loop: AgentLoop) -> None:
    transcript = loop.transcript
    if transcript is not None and transcript.written:
        log.info(
            "run %s: transcript %d entries, %.1f ms waited for their acks before model calls",
            run_id,
            transcript.written,
            loop.transcript_wait * 1000,
        )


def _unrecorded(terminal: TerminalEvent, error: BusError) -> RunFailed:
    """How a run ends when some of its events could not be stored: failed, whatever it did
    (the outcome it would have had, and a completed run's result, are in the detail)."""
    detail: dict[str, Any] = {
        "outcome": terminal.event_name,
        "reason": terminal.reason,
        "message": terminal.message,
    }
    if isinstance(terminal, RunCompleted):
        detail["result"] = terminal.result.model_dump(mode="json")
    return RunFailed(
        reason=Reason.RUNNER_ERROR,
        message=f"run events could not be stored: {error}",
        detail=detail,
        tokens_in=terminal.tokens_in,
        tokens_out=terminal.tokens_out,
        cost_usd=terminal.cost_usd,
    )


def _terminal(
    task: asyncio.Task[RunResult], handle: RunHandle, loop: AgentLoop | None
) -> TerminalEvent:
    usage = {}
    if loop is not None:
        usage = {
            "tokens_in": loop.usage.tokens_in,
            "tokens_out": loop.usage.tokens_out,
            "cost_usd": round(loop.usage.cost_usd, 6),
        }
    stopped: RunStopped | None = None
    if task.cancelled():
        stopped = handle.stop_reason or RunStopped(
            RunStatus.CANCELLED, Reason.TERMINATED, "stopped"
        )
    else:
        exc = task.exception()
        if exc is None:
            plan = loop.plan.ended if loop is not None else None
            if plan is not None:
                return RunCompleted(
                    reason=Reason.PLAN_NOT_APPROVED,
                    message=not_approved_message(plan),
                    result=task.result(),
                    **usage,
                )
            return RunCompleted(result=task.result(), **usage)
        if isinstance(exc, RunStopped):
            stopped = exc
        elif isinstance(exc, ResumeFailedError):
            stopped = RunStopped(RunStatus.FAILED, Reason.RESUME_FAILED, str(exc))
        elif isinstance(exc, (RunnerError, ToolError, OSError)):
            stopped = RunStopped(RunStatus.FAILED, Reason.RUNNER_ERROR, str(exc))
        else:
            log.error("run crashed", exc_info=exc)
            stopped = RunStopped(
                RunStatus.FAILED, Reason.RUNNER_ERROR, f"{type(exc).__name__}: {exc}"
            )
    if stopped.status == RunStatus.CANCELLED:
        by = stopped.detail.get("by")
        return RunCancelled(
            reason=stopped.reason, message=stopped.message, cancelled_by=by, **usage
        )
    return RunFailed(reason=stopped.reason, message=stopped.message, detail=stopped.detail, **usage)
