"""Warm runner processes of the local runtime: started in slots, each handed one run on its
stdin, or discarded (docs/warm-starts.md); `WarmPool` keeps their books.

A slot is ``<workdir>/warm-<id>/``: the runner's run dir (``runner.log``, ``runner.pid``,
``home/``), and ``workspace``, the path of its workspace ``<workspace_root>/warm-<id>``. A
warm runner starts as ``<command> --warm`` with the runners' environment minus any NATS
credential (no run id, no trace context either), its stdin a pipe this process keeps. At the
hand-off the slot gets the run's ``config.json`` and ``run`` (the run id: taken), and is
renamed ``<workdir>/<run_id>``, the run's dir (``warm-<id>`` left as a link to it), so
everything that finds a run by its run dir (status, cancel, logs, a new scheduler's adoption)
or its runner by its working directory finds it as for a cold run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nexus_events.events import RunConfig
from nexus_events.events.warm import WarmHandoff

from nexus_scheduler.runtime.confinement import Confinement, RunShape, workspace_root
from nexus_scheduler.runtime.sessions import (
    RunnerPid,
    kill_session,
    read_pid_file,
    signal_group,
    spawn_runner,
    write_pid_file,
)
from nexus_scheduler.runtime.warm_pool import WarmPool

log = logging.getLogger(__name__)

SLOT_PREFIX = "warm-"
TAKEN_FILE = "run"  # in a taken slot: the id of the run it serves
WORKSPACE_FILE = "workspace"  # in a slot: its workspace's path
WARM_FLAG = "--warm"
# What a runner connects to NATS as: a warm runner holds none; the hand-off gives the run's.
NATS_CREDENTIALS = frozenset(
    {"NEXUS_NATS_USER", "NEXUS_NATS_PASSWORD", "NEXUS_NATS_TOKEN", "NEXUS_NATS_CREDS_FILE"}
)


@dataclass(eq=False)
class WarmRunner:
    """One warm runner process and its slot."""

    agent: str
    shape: RunShape
    slot: Path
    workspace: Path
    env: dict[str, str]  # what it was started with (the hand-off sends the difference)
    proc: asyncio.subprocess.Process
    runner: RunnerPid
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def remove_slot(slot: Path) -> None:
    """Remove a slot, its workspace and the tools' home beside it."""
    try:
        workspace: Path | None = Path((slot / WORKSPACE_FILE).read_text().strip())
    except OSError:
        workspace = None
    if workspace is not None and workspace.name == slot.name:  # never another path
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(workspace.with_name(f"{workspace.name}.home"), ignore_errors=True)
    shutil.rmtree(slot, ignore_errors=True)


def _mark_taken(slot: Path, pid: int, config: RunConfig, run_dir: Path) -> None:
    write_private(slot / "config.json", config.model_dump_json())
    write_pid_file(slot, pid, config.attempt)
    (slot / TAKEN_FILE).write_text(config.run_id)
    # The slot becomes the run's dir, as a cold run's is: whatever finds a run's runner by
    # its dir or its working directory finds it. The runner (its cwd follows) keeps the path
    # it was started with (its HOME, its sandbox's binds): a link to the run's dir.
    slot.rename(run_dir)
    slot.symlink_to(run_dir.name)  # relative: the workdir may move with its runs


def _unmark_taken(slot: Path, run_dir: Path) -> None:
    if slot.is_symlink():
        slot.unlink()
    if not slot.exists() and run_dir.is_dir():
        run_dir.rename(slot)
    (slot / TAKEN_FILE).unlink(missing_ok=True)


def discard_found(workdir: Path) -> int:
    """A new scheduler's look at the slots a previous one left: a taken slot's runner is the
    run's (adopted by its run dir, as any runner); an idle one's is killed with its session
    and its slot removed. Returns how many were discarded."""
    discarded = 0
    for slot in sorted(workdir.glob(f"{SLOT_PREFIX}*")):
        if not slot.is_dir() or slot.is_symlink() or (slot / TAKEN_FILE).exists():
            continue
        runner = read_pid_file(slot)
        if runner is not None and runner.alive():
            signal_group(runner.pid, signal.SIGKILL)
        if runner is not None:
            kill_session(runner)
        remove_slot(slot)
        discarded += 1
    if discarded:
        log.info("discarded %d idle warm runner(s) a previous scheduler left", discarded)
    return discarded


class WarmRunners:
    """Starts, hands off and discards warm runners; refills each agent's pool in the
    background after its runs are dispatched."""

    def __init__(
        self,
        workdir: Path,
        command: Sequence[str],
        *,
        base_env: Callable[[Path], dict[str, str]],
        confinement: Confinement | None,
        sizes: dict[str, int],
        max_idle: int,
    ) -> None:
        self.workdir = workdir
        self.command = tuple(command)
        self.base_env = base_env  # the runners' environment given a HOME
        self.confinement = confinement
        self.pool: WarmPool[WarmRunner] = WarmPool(sizes=dict(sizes), max_idle=max_idle)
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._backing_off: set[str] = set()  # agents whose refill waits its backoff
        self._watchers: set[asyncio.Task[None]] = set()
        self._discards: set[asyncio.Task[None]] = set()
        self._closed = False

    def open(self) -> None:
        """Refill again (a runtime started again after `close`)."""
        self._closed = False

    def warm_env(self, home: Path) -> dict[str, str]:
        """A warm runner's environment: the runners' own, without any NATS credential."""
        return {k: v for k, v in self.base_env(home).items() if k not in NATS_CREDENTIALS}

    def take(self, agent: str, shape: RunShape) -> WarmRunner | None:
        """An idle runner of `agent` of exactly `shape` (never idle again), if one lives."""
        while (runner := self.pool.take(agent, shape)) is not None:
            if runner.proc.returncode is None:
                return runner
            self._spawn_discard(runner)  # died, its watcher not run yet
        return None

    def refill(self, agent: str, shape: RunShape) -> None:
        """A run of `agent` of `shape` was dispatched: fill its pool with that shape."""
        if self._closed:
            return
        for stale in self.pool.learn(agent, shape):
            self._spawn_discard(stale)
        self._ensure_refill(agent)

    def _ensure_refill(self, agent: str) -> None:
        running = self._refills.get(agent)
        if running is None or running.done():
            self._refills[agent] = asyncio.create_task(self._fill(agent), name=f"warm:{agent}")

    def _spawn_discard(self, runner: WarmRunner) -> None:
        task = asyncio.create_task(self.discard(runner), name=f"discard:{runner.slot.name}")
        self._discards.add(task)
        task.add_done_callback(self._discards.discard)

    async def _fill(self, agent: str) -> None:
        while not self._closed and self.pool.wanted(agent) > 0:
            delay = self.pool.backoff(agent)
            self.pool.starting[agent] += 1
            try:
                if delay:
                    self._backing_off.add(agent)  # only then may close cancel this task
                    try:
                        await asyncio.sleep(delay)
                    finally:
                        self._backing_off.discard(agent)
                runner = await self.start(agent, self.pool.templates[agent])
            except OSError as exc:
                log.warning("warm runner of %s could not start: %s", agent, exc)
                self.pool.died(agent)
                continue
            finally:
                self.pool.starting[agent] -= 1
            if self._closed:
                await self.discard(runner)
                return
            self.pool.add(runner)
            runner.watcher = asyncio.create_task(self._watch(runner), name=f"warm:{runner.slot}")
            self._watchers.add(runner.watcher)
            runner.watcher.add_done_callback(self._watchers.discard)

    async def start(self, agent: str, shape: RunShape) -> WarmRunner:
        """Start a warm runner of `shape` in a new slot (raises OSError)."""
        slot = self.workdir / f"{SLOT_PREFIX}{uuid.uuid4().hex[:12]}"
        slot.mkdir(parents=True)
        try:
            env = self.warm_env(slot / "home")
            workspace = workspace_root(env) / slot.name
            (slot / WORKSPACE_FILE).write_text(str(workspace))
            argv = [*self.command, WARM_FLAG]
            if self.confinement is not None:
                argv = self.confinement.wrap_shaped(
                    argv, shape, env, run_dir=slot, workspace=workspace
                )
            proc = await spawn_runner(argv, slot, env, stdin=asyncio.subprocess.PIPE)
        except OSError:
            remove_slot(slot)
            raise
        runner = write_pid_file(slot, proc.pid)
        return WarmRunner(agent, shape, slot, workspace, env, proc, runner)

    async def _watch(self, runner: WarmRunner) -> None:
        """A runner that dies idle is removed and replaced (after the pool's backoff)."""
        code = await runner.proc.wait()
        if not self.pool.forget(runner):
            return  # handed a run (its reaper watches it now) or discarded
        log.warning(
            "warm runner %s of %s died idle (exit %s)", runner.slot.name, runner.agent, code
        )
        self.pool.died(runner.agent)
        kill_session(runner.runner)
        remove_slot(runner.slot)
        if not self._closed:
            self._ensure_refill(runner.agent)

    async def hand_off(
        self, runner: WarmRunner, config: RunConfig, run_env: dict[str, str], run_dir: Path
    ) -> bool:
        """Hand `config` to `runner` (taken from the pool): config and marks in its slot, the
        slot renamed `run_dir`, the hand-off line on its stdin, which is then closed. False
        (the runner discarded, nothing of the run left behind) when it cannot be written."""
        slot = runner.slot
        _mark_taken(slot, runner.proc.pid, config, run_dir)
        handoff = WarmHandoff(
            config=config,
            env={k: v for k, v in run_env.items() if runner.env.get(k) != v},
            workspace=str(runner.workspace),
        )
        stdin = runner.proc.stdin
        why = "it has ended" if stdin is None or runner.proc.returncode is not None else None
        if stdin is not None and why is None:
            try:
                stdin.write(handoff.model_dump_json().encode() + b"\n")
                await stdin.drain()
                stdin.close()
            except (BrokenPipeError, ConnectionResetError) as exc:
                why = str(exc) or type(exc).__name__
        if why is None:
            return True
        log.warning("warm runner %s could not take run %s: %s", slot.name, config.run_id, why)
        _unmark_taken(slot, run_dir)
        await self.discard(runner)
        return False

    async def discard(self, runner: WarmRunner) -> None:
        """Kill a runner that serves no run, with its session, and remove its slot."""
        self.pool.forget(runner)
        if runner.proc.stdin is not None:
            runner.proc.stdin.close()
        if runner.proc.returncode is None:
            signal_group(runner.proc.pid, signal.SIGKILL)
        await runner.proc.wait()
        kill_session(runner.runner)
        remove_slot(runner.slot)

    async def close(self) -> None:
        """Stop refilling and discard the idle runners (busy ones are their runs')."""
        self._closed = True
        # A refill starting a runner finishes the start and discards it (cancelled there, the
        # process would be left with no owner); one waiting its backoff stops at once.
        for agent, task in self._refills.items():
            if agent in self._backing_off:
                task.cancel()
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._refills.values(), *self._discards, return_exceptions=True)
        for runner in self.pool.drain():
            with contextlib.suppress(OSError):
                await self.discard(runner)
        self._refills.clear()
