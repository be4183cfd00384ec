"""Runs as local subprocesses (``nexus dev``, tests): one process group per run.

The RunConfig is written to ``<workdir>/<run_id>/config.json`` (mode 0600) and the runner is
started as ``<command...> --config <file>`` with the caller's trace context in
``TRACEPARENT``/``TRACESTATE``, in an environment built from scratch (`runner_env`: only the
variables the runner reads, ``HOME`` = ``<run dir>/home``); stdout and stderr go to
``runner.log`` beside it. With a `Confinement` (runtime/confinement.py) the runner starts
inside bubblewrap: read-only host, its workspace and home the only writable paths, no network
but its endpoints. Cancel sends SIGTERM to the whole process group and SIGKILL after
the kill grace.

The runner leads a session of its own; its pid and start time go to ``runner.pid`` in the run
dir (``runner-a<n>.pid`` for attempt n > 1), so a new scheduler (a restart) re-adopts a runner
that still lives instead of calling it gone.

A resumed run (attempt n+1, issue 24) is a new process in the same run dir: its config.json
says the new attempt, its output is appended to the same ``runner.log``, and it replaces the
run's entry (a still-living older attempt is stopped first). Status and cancel name the
attempt, so a call about attempt n never reaches the process of attempt n+1.

With a warm pool (``warm_pool``, docs/warm-starts.md) a run's first attempt may instead be
handed to a runner started ahead of it (runtime/warm_runners.py), whose slot becomes the run
dir; everything below holds for it as for a cold runner.

When a runner ends, however it ends, what is left of its session (tools and their children,
in process groups of their own) is killed.

The table of processes is bounded: an ended runner is remembered (its exit code answers
`status`) until `finished_kept` runners ended after it or `finished_ttl` seconds passed,
whichever comes first; then `status` answers from its pid file (gone). The scheduler needs
an exit only for the exit grace after it (seconds), so a long-lived scheduler no longer
keeps every process it ever started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nexus_events.events import RunConfig
from nexus_events.runtime import telemetry

from nexus_scheduler.metrics import RunnerStart, SchedulerMetrics
from nexus_scheduler.runtime.base import AgentRuntimeError, RunHandle, RuntimeState, RuntimeStatus
from nexus_scheduler.runtime.confinement import UNCONFINED, Confinement, RunShape, workspace_root
from nexus_scheduler.runtime.runner_env import DEFAULT_PATH, passes, runner_env
from nexus_scheduler.runtime.sessions import (
    RunnerPid,
    kill_session,
    read_pid_file,
    signal_group,
    spawn_runner,
    write_pid_file,
)
from nexus_scheduler.runtime.warm_runners import WarmRunners, discard_found, write_private

log = logging.getLogger(__name__)

DEFAULT_COMMAND = (sys.executable, "-m", "nexus_runner")
# How often a log follower looks for new output while the process lives.
_LOG_POLL_SECONDS = 0.1
# Ended runners remembered: the scheduler reads an exit within its exit grace (10 s by
# default) and a tick (1 s), so an hour and a thousand runs are ample and bound the table.
FINISHED_KEPT = 1000
FINISHED_TTL_SECONDS = 3600.0


@dataclass
class _Proc:
    run_id: str
    proc: asyncio.subprocess.Process
    dir: Path
    runner: RunnerPid
    attempt: int = 1
    killed: bool = False
    warm: bool = False  # a warm runner was handed the run

    @property
    def log_path(self) -> Path:
        return self.dir / "runner.log"


class LocalProcessRuntime:
    kind = "local"

    def __init__(
        self,
        workdir: Path,
        *,
        command: Sequence[str] = DEFAULT_COMMAND,
        kill_grace: float = 10.0,
        env: Mapping[str, str] | None = None,
        pass_env: Sequence[str] = (),
        finished_kept: int = FINISHED_KEPT,
        finished_ttl: float = FINISHED_TTL_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        confinement: Confinement | None = None,
        credentials: Callable[[RunConfig], Mapping[str, str]] | None = None,
        warm_pool: Mapping[str, int] | None = None,
        warm_pool_max: int = 4,
    ) -> None:
        self.workdir = Path(workdir)
        self.command = tuple(command)
        self.kill_grace = kill_grace
        self.env = dict(env or {})  # set for every runner, whatever the scheduler's env
        self.pass_env = tuple(pass_env)  # more names passed from the scheduler's env
        self.finished_kept = finished_kept
        self.finished_ttl = finished_ttl
        self._monotonic = monotonic
        self.confinement = confinement  # None: runners run unconfined
        # The run's own NATS credential (NEXUS_NATS_*), None: runners connect as configured.
        self.credentials = credentials
        self._procs: dict[str, _Proc] = {}
        # Runners a previous scheduler started that were found alive (by their pid file):
        # run id -> (attempt, runner).
        self._adopted: dict[str, tuple[int, RunnerPid]] = {}
        # Ended runners still in `_procs`/`_adopted`, oldest end first: run id -> when.
        self._finished: OrderedDict[str, float] = OrderedDict()
        self._reapers: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self.metrics: SchedulerMetrics | None = None  # set by the app (`attach_metrics`)
        # Warm runners (docs/warm-starts.md), per agent id ("default": the others); None: off.
        self.warm = (
            WarmRunners(
                self.workdir,
                self.command,
                base_env=self._base_env,
                confinement=confinement,
                sizes=dict(warm_pool),
                max_idle=warm_pool_max,
            )
            if warm_pool and any(warm_pool.values()) and warm_pool_max > 0
            else None
        )

    def attach_metrics(self, metrics: SchedulerMetrics) -> None:
        """Count warm and cold starts, observe the idle warm runners."""
        self.metrics = metrics
        if self.warm is not None:
            pool = self.warm.pool
            metrics.observe_idle_runners(lambda: pool.idle_count)

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.warm is not None:
            self.warm.open()
        if self.warm is not None or any(self.workdir.glob("warm-*")):
            # Idle warm runners of a previous scheduler: killed, their slots removed (a taken
            # slot's runner is adopted by its run's dir, as any runner).
            await asyncio.to_thread(discard_found, self.workdir)

    async def close(self) -> None:
        """Forget the processes (they keep running; a new scheduler re-adopts them), and
        discard the idle warm runners (a new scheduler could not hand them a run)."""
        if self.warm is not None:
            await self.warm.close()
        for task in self._reapers:
            task.cancel()
        self._reapers.clear()
        self._procs.clear()
        self._adopted.clear()
        self._finished.clear()

    @property
    def tracked(self) -> int:
        """How many runners this runtime remembers (live and recently ended)."""
        return len(self._procs) + len(self._adopted)

    def _ended(self, run_id: str) -> None:
        """Note that a remembered runner ended, and forget the ones ended too long ago."""
        if run_id not in self._finished:
            self._finished[run_id] = self._monotonic()
        self._forget_ended()

    def _forget_ended(self) -> None:
        horizon = self._monotonic() - self.finished_ttl
        while self._finished:
            run_id, ended_at = next(iter(self._finished.items()))
            if len(self._finished) <= self.finished_kept and ended_at > horizon:
                break
            del self._finished[run_id]
            self._procs.pop(run_id, None)
            self._adopted.pop(run_id, None)

    def run_dir(self, run_id: str) -> Path:
        return self.workdir / run_id

    def _base_env(self, home: Path) -> dict[str, str]:
        """What every runner starts with: no run id, run credential nor trace context."""
        parent = dict(os.environ)
        # The runner continues the dispatching span's trace, never an inherited one.
        parent.pop(telemetry.TRACEPARENT_ENV, None)
        parent.pop(telemetry.TRACESTATE_ENV, None)
        # A confined runner's tools always get their own sandbox: refused, never run beside
        # the runner's credentials, if it cannot be built.
        sandbox = {"NEXUS_TOOL_SANDBOX": "on"} if self.confinement is not None else {}
        return runner_env(
            parent, home, extra_names=self.pass_env, overrides={**self.env, **sandbox}
        )

    def _run_env(self, config: RunConfig, home: Path) -> dict[str, str]:
        env = self._base_env(home)
        env.update(self.credentials(config) if self.credentials else {})
        env["NEXUS_RUN_ID"] = config.run_id
        env.update(telemetry.trace_env())
        return env

    def shape_of(self, config: RunConfig) -> RunShape:
        """The sandbox `config` needs (one shape for every run when unconfined)."""
        if self.confinement is None:
            return UNCONFINED
        parent = {k: v for k, v in os.environ.items() if passes(k, self.pass_env)}
        env = {**parent, **self.env}
        env.setdefault("PATH", DEFAULT_PATH)
        return self.confinement.shape(self.command, config, env)

    async def start_run(self, config: RunConfig) -> RunHandle:
        async with self._lock:
            existing = self._procs.get(config.run_id)
            if existing is not None and existing.attempt >= config.attempt:
                return RunHandle(self.kind, str(existing.proc.pid), warm=existing.warm)
            if existing is not None or config.run_id in self._adopted:
                # Attempt n+1 replaces attempt n, which must not go on beside it (the
                # scheduler stops it first; a no-op then).
                await self._stop_older(config.run_id, config.attempt)
            shape = self.shape_of(config)
            entry = await self._start_warm(config, shape) or await self._start_cold(config, shape)
            self._procs[config.run_id] = entry
            self._adopted.pop(config.run_id, None)
            self._finished.pop(config.run_id, None)  # the run's new attempt is not ended
            reaper = asyncio.create_task(self._reap_on_exit(entry), name=f"reap:{config.run_id}")
            self._reapers.add(reaper)
            reaper.add_done_callback(self._reapers.discard)
        if self.warm is not None:
            self.warm.refill(config.agent_id, shape)  # warm or cold, in the background
        return RunHandle(self.kind, str(entry.proc.pid), warm=entry.warm)

    async def _start_warm(self, config: RunConfig, shape: RunShape) -> _Proc | None:
        """Hand attempt 1 to an idle warm runner of its agent and shape, if one lives. A
        resume starts cold (docs/warm-starts.md)."""
        run_dir = self.run_dir(config.run_id)
        if self.warm is None or config.attempt != 1 or run_dir.exists() or run_dir.is_symlink():
            return None
        runner = self.warm.take(config.agent_id, shape)
        if runner is None:
            return None
        env = self._run_env(config, runner.slot / "home")
        if not await self.warm.hand_off(runner, config, env, run_dir):
            return None
        self._count_start(RunnerStart.WARM)
        return _Proc(config.run_id, runner.proc, run_dir, runner.runner, attempt=1, warm=True)

    async def _start_cold(self, config: RunConfig, shape: RunShape) -> _Proc:
        run_dir = self.run_dir(config.run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_private(run_dir / "config.json", config.model_dump_json())
        env = self._run_env(config, run_dir / "home")
        argv = [*self.command, "--config", str(run_dir / "config.json")]
        if self.confinement is not None:
            argv = self.confinement.wrap_shaped(
                argv, shape, env, run_dir=run_dir, workspace=workspace_root(env) / config.run_id
            )
        try:
            proc = await spawn_runner(argv, run_dir, env, stdin=asyncio.subprocess.DEVNULL)
        except OSError as exc:
            raise AgentRuntimeError(f"cannot start {self.command[0]}: {exc}") from exc
        runner = write_pid_file(run_dir, proc.pid, config.attempt)
        self._count_start(RunnerStart.COLD)
        return _Proc(config.run_id, proc, run_dir, runner, attempt=config.attempt)

    def _count_start(self, how: RunnerStart) -> None:
        if self.metrics is not None:
            self.metrics.runner_started(how)

    async def _stop_older(self, run_id: str, attempt: int) -> None:
        entry = self._procs.get(run_id)
        if entry is not None and entry.attempt < attempt:
            await self.cancel_run(run_id, entry.attempt)
        adopted = self._adopted.get(run_id)
        if adopted is not None and adopted[0] < attempt:
            await self.cancel_run(run_id, adopted[0])

    async def _reap_on_exit(self, entry: _Proc) -> None:
        await entry.proc.wait()
        _reap(entry.run_id, entry.runner)
        if self._procs.get(entry.run_id) is entry:  # not replaced by a newer attempt
            self._ended(entry.run_id)

    async def cancel_run(self, run_id: str, attempt: int = 1) -> None:
        entry = self._procs.get(run_id)
        if entry is None or entry.attempt != attempt:
            await self._cancel_foreign(run_id, attempt)
            return
        if entry.proc.returncode is not None:
            _reap(run_id, entry.runner)
            return
        entry.killed = True
        signal_group(entry.proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(entry.proc.wait(), timeout=self.kill_grace)
        except TimeoutError:
            signal_group(entry.proc.pid, signal.SIGKILL)
            await entry.proc.wait()
        # Children that ignored SIGTERM outlive the leader, and tools sit in groups of their
        # own: clear the whole session either way.
        signal_group(entry.proc.pid, signal.SIGKILL)
        _reap(run_id, entry.runner)

    def _adopted_runner(self, run_id: str, attempt: int) -> RunnerPid | None:
        adopted = self._adopted.get(run_id)
        return adopted[1] if adopted is not None and adopted[0] == attempt else None

    async def _cancel_foreign(self, run_id: str, attempt: int) -> None:
        """Stop a runner this scheduler did not start (re-adopted after a restart), or an
        attempt older than the one it has."""
        runner = self._adopted_runner(run_id, attempt) or read_pid_file(
            self.run_dir(run_id), attempt
        )
        if runner is None:
            return
        if runner.alive():
            signal_group(runner.pid, signal.SIGTERM)
            # Not our child: no wait() to await, so poll until it is gone or the grace ends.
            for _ in range(max(1, round(self.kill_grace / _LOG_POLL_SECONDS))):
                if not runner.alive():
                    break
                await asyncio.sleep(_LOG_POLL_SECONDS)
            if runner.alive():
                signal_group(runner.pid, signal.SIGKILL)
        _reap(run_id, runner)

    async def status(self, run_id: str, attempt: int = 1) -> RuntimeStatus:
        self._forget_ended()  # the age bound holds even when nothing ends
        entry = self._procs.get(run_id)
        if entry is None or entry.attempt != attempt:
            return self._foreign_status(run_id, attempt)
        code = entry.proc.returncode
        if code is None:
            return RuntimeStatus(RuntimeState.RUNNING)
        if code < 0:
            name = signal.Signals(-code).name
            return RuntimeStatus(
                RuntimeState.EXITED, reason=name, message=f"killed by {name}", exit_code=code
            )
        return RuntimeStatus(RuntimeState.EXITED, message=f"exit code {code}", exit_code=code)

    def _foreign_status(self, run_id: str, attempt: int) -> RuntimeStatus:
        adopted = self._adopted_runner(run_id, attempt)
        runner = adopted or read_pid_file(self.run_dir(run_id), attempt)
        if runner is None:
            return RuntimeStatus(RuntimeState.GONE, message="no such process in this scheduler")
        if runner.alive():
            if adopted is None and run_id not in self._procs:
                self._adopted[run_id] = (attempt, runner)
                log.info("re-adopted runner of %s attempt %d (pid %d)", run_id, attempt, runner.pid)
            return RuntimeStatus(RuntimeState.RUNNING)
        # Not our child, so its exit status is unknown; its leftovers go either way.
        _reap(run_id, runner)
        if adopted is not None:
            self._ended(run_id)
            return RuntimeStatus(
                RuntimeState.EXITED, message=f"adopted runner {runner.pid} ended (exit unknown)"
            )
        return RuntimeStatus(RuntimeState.GONE, message=f"runner {runner.pid} is not running")

    async def stream_logs(self, run_id: str, attempt: int = 1) -> AsyncIterator[str]:
        """The run's log (every attempt appends to it), followed while `attempt` runs."""
        entry = self._procs.get(run_id)
        if entry is not None and entry.attempt != attempt:
            entry = None
        path = entry.log_path if entry else self.run_dir(run_id) / "runner.log"
        if not path.exists():
            return
        with path.open("rb") as fh:
            pending = b""
            while True:
                # Checked before reading: output written before the exit is still read.
                ended = entry is None or entry.proc.returncode is not None
                chunk = fh.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith(b"\n"):
                        yield pending.decode(errors="replace").rstrip("\n")
                        pending = b""
                    continue
                if ended:
                    break
                await asyncio.sleep(_LOG_POLL_SECONDS)
            if pending:
                yield pending.decode(errors="replace")


def _reap(run_id: str, runner: RunnerPid) -> None:
    killed = kill_session(runner)
    if killed:
        log.warning("run %s: killed %d leftover process(es) %s", run_id, len(killed), killed)
