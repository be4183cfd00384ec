"""Local runner processes on their own: pid files, liveness by start time, session kill.

The runner is started as a session leader, so every process it starts (its tools run in
their own process groups, but in its session) carries its pid as session id, even after it
died and they were re-parented. A pid alone may be recycled; the pid and the kernel's start
time of the process (``/proc/<pid>/stat`` field 22) name one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PID_FILE = "runner.pid"
_PROC = Path("/proc")
_KILL_ROUNDS = 3


@dataclass(frozen=True)
class ProcStat:
    state: str
    session: int
    start_time: int


@dataclass(frozen=True)
class RunnerPid:
    """What a run dir records of its runner process."""

    pid: int
    start_time: int | None  # None where /proc is not available

    def alive(self) -> bool:
        """The same process (not a recycled pid) still runs (a zombie does not)."""
        if not _PROC.is_dir():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        st = proc_stat(self.pid)
        if st is None or st.state in ("Z", "X"):
            return False
        return self.start_time is None or st.start_time == self.start_time

    def recycled(self) -> bool:
        """Another process now has the pid (so no process is left in the old session)."""
        st = proc_stat(self.pid)
        return st is not None and self.start_time is not None and st.start_time != self.start_time


def proc_stat(pid: int) -> ProcStat | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(state=fields[0], session=int(fields[3]), start_time=int(fields[19]))


def pid_file(attempt: int = 1) -> str:
    """The pid file of an attempt: attempt 1 keeps the name it always had."""
    return PID_FILE if attempt == 1 else f"runner-a{attempt}.pid"


def write_pid_file(run_dir: Path, pid: int, attempt: int = 1) -> RunnerPid:
    st = proc_stat(pid)
    record = RunnerPid(pid, st.start_time if st is not None else None)
    name = pid_file(attempt)
    tmp = run_dir / f".{name}.tmp"
    tmp.write_text(json.dumps({"pid": record.pid, "start_time": record.start_time}))
    tmp.replace(run_dir / name)
    return record


def read_pid_file(run_dir: Path, attempt: int = 1) -> RunnerPid | None:
    try:
        data = json.loads((run_dir / pid_file(attempt)).read_text())
        start = data.get("start_time")
        return RunnerPid(int(data["pid"]), int(start) if start is not None else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def session_members(sid: int) -> list[int]:
    """Live processes whose session id is `sid` (Linux); empty where /proc is missing."""
    if not _PROC.is_dir():
        return []
    out = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        st = proc_stat(int(entry.name))
        if st is not None and st.session == sid and st.state not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_session(runner: RunnerPid) -> list[int]:
    """SIGKILL every process left in the runner's session; return their pids.

    Tools run in process groups of their own, so killing the runner's group misses them;
    the session reaches them all. Without /proc only the runner's own group is reached.
    """
    if runner.recycled():
        return []  # the pid could not have been reused while its session had members
    if not _PROC.is_dir():
        signal_group(runner.pid, signal.SIGKILL)
        return []
    killed: list[int] = []
    # A member may fork between the scan and its kill; its child is in the session too.
    for _ in range(_KILL_ROUNDS):
        members = [p for p in session_members(runner.pid) if p not in killed]
        if not members:
            break
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


async def spawn_runner(
    argv: Sequence[str], run_dir: Path, env: Mapping[str, str], *, stdin: int
) -> asyncio.subprocess.Process:
    """A runner process working in `run_dir`, its output appended to ``runner.log`` there,
    leading a session of its own (so its whole group can be signalled and its leftovers
    found); raises OSError if it cannot start."""
    with (run_dir / "runner.log").open("ab") as log_file:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=log_file,
            stderr=asyncio.subprocess.STDOUT,
            cwd=run_dir,
            env=dict(env),
            start_new_session=True,  # own session => own process group
        )
