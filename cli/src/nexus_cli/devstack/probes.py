"""Health probes of the dev stack's parts, shared by the supervisor, `dev status` and `doctor`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nexus_events.runtime import ports

# The scheduler's lease (nexus_scheduler.lease.LEADER_KEY) in its KV bucket (settings default).
SCHEDULER_LEASE_BUCKET = "nexus_scheduler"
SCHEDULER_LEASE_KEY = "leader"
# Seconds one probe may take.
PROBE_TIMEOUT = 2.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 to listen on (`nexus_events.runtime.ports`: outside the
    ephemeral range, so no outgoing connection takes it first)."""
    return ports.free_port()


async def http_status(url: str, within: float = PROBE_TIMEOUT) -> int:
    """The status code of ``GET url`` (0 if nothing answers); plain HTTP/1.1, no client lib."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                path = parts.path or "/"
                writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                await writer.drain()
                line = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return 0
    fields = line.split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


async def http_json(url: str, within: float = PROBE_TIMEOUT) -> dict[str, Any] | None:
    """The JSON object ``GET url`` answers with 200 (nats-server's monitoring endpoints), or
    None: nothing answers, another status, not a JSON object."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path + (f"?{parts.query}" if parts.query else "") or "/"
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                # HTTP/1.0: the server closes after the body, so reading to EOF is the body.
                writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                await writer.drain()
                raw = await reader.read()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return None
    head, _, body = raw.partition(b"\r\n\r\n")
    fields = head.split(b"\r\n", 1)[0].split()
    if len(fields) < 2 or fields[1] != b"200":
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


async def nats_answers(url: str, within: float = PROBE_TIMEOUT) -> bool:
    """Whether a NATS server greets on `url` (its INFO line), without a client connection."""
    parts = urlsplit(url.split(",", maxsplit=1)[0])
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection(
                parts.hostname or "127.0.0.1", parts.port or 4222
            )
            try:
                greeting = await reader.read(4)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    return greeting.startswith(b"INFO")


async def scheduler_leader(js: JetStreamContext) -> str | None:
    """The replica holding the scheduler lease, or None if nobody leads."""
    try:
        kv = await js.key_value(SCHEDULER_LEASE_BUCKET)
        entry = await kv.get(SCHEDULER_LEASE_KEY)
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
        return None
    return entry.value.decode() if entry.value else None
