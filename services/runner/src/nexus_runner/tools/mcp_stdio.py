"""The stdio transport for MCP servers: one process group per server, killed whole.

The `mcp` package's own `stdio_client` merges the operator's ``HOME``/``PATH``/``USER``… into
the server's environment, sends its stderr to ours, and kills the process group only while
the leader is alive (a crashed server's children survive). Runs need the opposite on all
three, so this transport spawns the server itself: exactly the environment it is given,
stderr to a file, a new session whose whole group gets SIGTERM then SIGKILL when the
transport closes, whatever the leader's state. The JSON-RPC framing (one message per line)
is the same as the SDK's.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream
from mcp import types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

# Time the group gets between SIGTERM and SIGKILL: servers only need to drop pipes.
TERM_GRACE = 0.5


def kill_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to process group `pgid`; whether any member was there to receive it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user; nothing more this runner can do
        return True
    return True


async def stop_group(process: anyio.abc.Process) -> None:
    """SIGTERM the process's group, wait a little for the leader, then SIGKILL the group."""
    pgid = process.pid  # the leader of a new session: its pid is the group id
    if kill_group(pgid, signal.SIGTERM):
        with anyio.move_on_after(TERM_GRACE):
            await process.wait()
        kill_group(pgid, signal.SIGKILL)
    with anyio.move_on_after(TERM_GRACE):
        await process.wait()


@asynccontextmanager
async def stdio_transport(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    stderr: IO[str],
    on_spawn: Callable[[anyio.abc.Process], None],
) -> AsyncIterator[TransportStreams]:
    """Spawn `argv` in its own session and yield the MCP read/write streams to it.

    Raises `OSError` if the process cannot be started. On exit (normal, error or
    cancellation) the whole process group is stopped before this returns.
    """
    process = await anyio.open_process(
        argv, env=env, cwd=cwd, stderr=stderr, start_new_session=True
    )
    on_spawn(process)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        buffer = ""
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with read_send:
                async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                    lines = (buffer + chunk).split("\n")
                    buffer = lines.pop()
                    for line in lines:
                        if not line.strip():
                            continue
                        message: SessionMessage | Exception
                        try:
                            message = SessionMessage(
                                types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                            )
                        except ValueError as exc:
                            message = exc
                        await read_send.send(message)

    async def writer() -> None:
        assert process.stdin is not None
        with contextlib.suppress(
            anyio.ClosedResourceError, anyio.BrokenResourceError, BrokenPipeError, OSError
        ):
            async with write_recv:
                async for item in write_recv:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await stop_group(process)
            for stream in (read_send, read_recv, write_send, write_recv):
                await stream.aclose()
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await process.aclose()
