"""Run a subprocess in its own process group: timeout, output cap, scrubbed env, kill on cancel."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Variables a child process keeps; everything else (API keys, tokens, NATS creds) is dropped.
SAFE_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "USER", "TMPDIR", "SHELL")
# Seconds between SIGTERM and SIGKILL of a process group.
KILL_GRACE = 2.0


@dataclass(frozen=True)
class ProcessResult:
    exit_code: int | None  # None when it timed out
    output: str  # stdout and stderr interleaved, capped
    truncated: bool
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in SAFE_ENV_KEYS}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["GIT_TERMINAL_PROMPT"] = "0"
    # An edit in the same second as the previous test run (same size, same mtime second)
    # would otherwise be shadowed by a stale .pyc; agents edit and rerun that fast.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def _kill_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the group, give its leader `KILL_GRACE` seconds, then SIGKILL what is left.

    The SIGKILL goes to the group even when the leader exited in time: a member that ignores
    SIGTERM (or traps it and lingers) would otherwise outlive its leader, and nothing a tool
    started may stay behind.
    """
    _kill_group(proc, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=KILL_GRACE)
    _kill_group(proc, signal.SIGKILL)
    await proc.wait()
    # Read the output pipe to its end (the group is dead: it comes at once): its transport
    # closes on EOF, and a reader cancelled mid-output would leave it open past the run.
    if proc.stdout is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.stdout.read(), timeout=KILL_GRACE)
    # And closed outright (asyncio.subprocess.Process has no public close): a cancel that
    # lands in the read above must not leave the pipe to the garbage collector either.
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


async def run_process(
    argv: list[str],
    *,
    cwd: Path,
    timeout: float,
    output_cap: int,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> ProcessResult:
    """Run `argv` in its own process group (in the runner's session); collect capped output.

    On timeout the whole group gets SIGTERM then SIGKILL; if the awaiting task is cancelled
    the group is killed the same way before the cancellation propagates.
    """
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env) if env is not None else scrubbed_env(),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # Its own group (so killpg reaches only this tool and its children) but the
            # runner's session, so the runtime can still find and kill it if the runner dies.
            process_group=0,
        )
    )
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelled while asyncio was still connecting the pipes: the process already runs
        # (and may have started children), and asyncio would kill only the leader. Finish
        # starting it and take the whole group down.
        with contextlib.suppress(Exception):
            await _terminate(await spawn)
        raise
    chunks: list[bytes] = []
    size = 0
    truncated = False

    async def pump() -> None:
        nonlocal size, truncated
        assert proc.stdout is not None
        if stdin is not None and proc.stdin is not None:
            proc.stdin.write(stdin)
            await proc.stdin.drain()
            proc.stdin.close()
        while block := await proc.stdout.read(65536):
            if size < output_cap:
                chunks.append(block[: output_cap - size])
            if size + len(block) > output_cap:
                truncated = True
            size += len(block)
        await proc.wait()

    timed_out = False
    try:
        await asyncio.wait_for(pump(), timeout=timeout)
    except TimeoutError:
        timed_out = True
        await _terminate(proc)
    except asyncio.CancelledError:
        await _terminate(proc)
        raise
    text = b"".join(chunks).decode(errors="replace")
    return ProcessResult(
        exit_code=None if timed_out else proc.returncode,
        output=text,
        truncated=truncated,
        timed_out=timed_out,
    )
