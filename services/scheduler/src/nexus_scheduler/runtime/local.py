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

from nexus_scheduler.runtime.base import AgentRuntimeError, RunHandle, RuntimeState, RuntimeStatus
from nexus_scheduler.runtime.confinement import Confinement
from nexus_scheduler.runtime.runner_env import runner_env
from nexus_scheduler.runtime.sessions import (
    RunnerPid,
    kill_session,
    read_pid_file,
    signal_group,
    write_pid_file,
)

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

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)

    async def close(self) -> None:
        """Forget the processes (they keep running; a new scheduler re-adopts them)."""
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

    async def start_run(self, config: RunConfig) -> RunHandle:
        async with self._lock:
            existing = self._procs.get(config.run_id)
            if existing is not None and existing.attempt >= config.attempt:
                return RunHandle(self.kind, str(existing.proc.pid))
            if existing is not None or config.run_id in self._adopted:
                # Attempt n+1 replaces attempt n, which must not go on beside it (the
                # scheduler stops it first; a no-op then).
                await self._stop_older(config.run_id, config.attempt)
            run_dir = self.run_dir(config.run_id)
            run_dir.mkdir(parents=True, exist_ok=True)
            config_path = run_dir / "config.json"
            fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(config.model_dump_json())
            parent = dict(os.environ)
            # The runner continues the dispatching span's trace, never an inherited one.
            parent.pop(telemetry.TRACEPARENT_ENV, None)
            parent.pop(telemetry.TRACESTATE_ENV, None)
            env = runner_env(
                parent,
                run_dir / "home",
                extra_names=self.pass_env,
                overrides={
                    **self.env,
                    **(self.credentials(config) if self.credentials else {}),
                    "NEXUS_RUN_ID": config.run_id,
                    **telemetry.trace_env(),
                    # A confined runner's tools always get their own sandbox: refused,
                    # never run beside the runner's credentials, if it cannot be built.
                    **({"NEXUS_TOOL_SANDBOX": "on"} if self.confinement is not None else {}),
                },
            )
            argv = [*self.command, "--config", str(config_path)]
            if self.confinement is not None:
                argv = self.confinement.wrap_run(argv, config, env, run_dir)
            log_file = (run_dir / "runner.log").open("ab")
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=asyncio.subprocess.STDOUT,
                    cwd=run_dir,
                    env=env,
                    start_new_session=True,  # own session => own process group
                )
            except OSError as exc:
                raise AgentRuntimeError(f"cannot start {self.command[0]}: {exc}") from exc
            finally:
                log_file.close()
            runner = write_pid_file(run_dir, proc.pid, config.attempt)
            entry = _Proc(config.run_id, proc, run_dir, runner, attempt=config.attempt)
            self._procs[config.run_id] = entry
            self._adopted.pop(config.run_id, None)
            self._finished.pop(config.run_id, None)  # the run's new attempt is not ended
            reaper = asyncio.create_task(self._reap_on_exit(entry), name=f"reap:{config.run_id}")
            self._reapers.add(reaper)
            reaper.add_done_callback(self._reapers.discard)
            return RunHandle(self.kind, str(proc.pid))

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
