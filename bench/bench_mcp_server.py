"""The MCP server (`nexus mcp serve`, docs/mcp.md): what a coding assistant's tool call costs
beside the same request made directly over NATS, in one run, on the bench's nats-server and
PostgreSQL with a running core (memory lookups off).

- start_run -> run id: the `mcp` SDK's own client calling the tool over stdio (the server as
  an IDE starts it) and over streamable HTTP (a bearer token of an `operate` scope), beside
  the same over NATS: a JetStream publish of the RunRequested awaiting its PubAck, then core's
  runs.get until core has projected it (the tool returns the id only then, so that a get_run
  on it finds the run; it asks the same way: after 5 ms, doubling to 50 ms). The PubAck alone
  is shown too, and the same wait asking every 2 ms: core's own projection lag.
- get_run: the tool over both transports beside core's `nexus.core.v1.runs.get` query asked
  with a plain NATS request (the runs are ones core has already projected).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG, ensure_streams
from nexus_events.events import RunRequested
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.catalog_commands import apply_agent
from nexus_testing import free_port

CALLS = 200
WARMUP = 20
AGENT_ID = "bench-mcp"
AGENT = f"""
id: {AGENT_ID}
role: implementer
model: {{name: bench-model}}
system_prompt: You implement tasks.
tools: [read_file]
"""
NEXUS = str(Path(sys.executable).parent / "nexus")

Row = tuple[str, float, str, float]


def _percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


async def _timed(n: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    """Milliseconds of `n` sequential calls (after `WARMUP` untimed ones)."""
    for i in range(WARMUP):
        await call(-1 - i)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


def _payload(result: Any) -> dict[str, Any]:
    """A tool's JSON result; raises with the server's line when the call failed."""
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        raise RuntimeError(f"tool error: {text}")
    if isinstance(result.structured_content, dict):
        return result.structured_content
    data: dict[str, Any] = json.loads(text)
    return data


def _server_env(home: Path, nats_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_NATS_URL=nats_url,
        NEXUS_DEV_HOME=str(home / ".nexus"),
        NEXUS_CONTEXT_FILE=str(home / "contexts.yaml"),
        OTEL_SDK_DISABLED="true",
    )
    return env


@contextlib.asynccontextmanager
async def _http_server(home: Path, env: dict[str, str]) -> AsyncIterator[tuple[str, str]]:
    """`nexus mcp serve --http` with one operate token: (its /mcp URL, the token)."""
    token = secrets.token_urlsafe(32)
    tokens = home / "tokens.yaml"
    digest = hashlib.sha256(token.encode()).hexdigest()
    tokens.write_text(
        json.dumps({"tokens": [{"name": "bench", "sha256": digest, "scope": "operate"}]})
    )
    port = free_port()
    log = (home / "mcp-http.log").open("w")
    proc = await asyncio.create_subprocess_exec(
        NEXUS, "mcp", "serve", "--http", "--host", "127.0.0.1", "--port", str(port),
        "--tokens", str(tokens), env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(_healthy, f"{base}/healthz"):
            if proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nexus mcp serve --http: {(home / 'mcp-http.log').read_text()}")
            await asyncio.sleep(0.2)
        yield f"{base}/mcp", token
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


async def _mcp_figures(client: Client, known_run: str) -> tuple[list[float], list[float]]:
    """start_run and get_run latencies of one connected client (ms)."""

    async def start(_: int) -> None:
        started = _payload(await client.call_tool("start_run", {"agent": AGENT_ID, "input": "go"}))
        assert started["run_id"], started

    async def get(_: int) -> None:
        view = _payload(await client.call_tool("get_run", {"run_id": known_run}))
        assert known_run in json.dumps(view), view

    return await _timed(CALLS, start), await _timed(CALLS, get)


async def _nats_figures(bus: Bus, known_run: str) -> tuple[list[float], ...]:
    """The same requests straight over NATS (ms): publish, publish until projected, get."""
    body = RunRequested(agent_id=AGENT_ID, input="go", requested_by="bench")

    async def publish(i: int) -> int:
        run_id = f"bench-nats-{i}-{secrets.token_hex(4)}"
        ack = await bus.publish(subjects.run_event(run_id, "requested"), body)
        return ack.seq

    async def start(i: int) -> None:
        run_id = f"bench-nats-p-{i}-{secrets.token_hex(4)}"
        ack = await bus.publish(subjects.run_event(run_id, "requested"), body)
        await _projected(bus, run_id, ack.seq, poll=0.005, most=0.05)

    async def start_fine(i: int) -> None:
        run_id = f"bench-nats-f-{i}-{secrets.token_hex(4)}"
        ack = await bus.publish(subjects.run_event(run_id, "requested"), body)
        await _projected(bus, run_id, ack.seq, poll=0.002, most=0.002)

    query = json.dumps({"run_id": known_run}).encode()

    async def get(_: int) -> None:
        reply = await bus.nc.request(subjects.CORE_RUNS_GET, query, timeout=10)
        assert known_run.encode() in reply.data, reply.data

    return (
        await _timed(CALLS, publish),
        await _timed(CALLS, start),
        await _timed(CALLS, start_fine),
        await _timed(CALLS, get),
    )


async def _projected(bus: Bus, run_id: str, seq: int, poll: float, most: float) -> None:
    """Until core's runs.get shows `run_id` at stream sequence `seq` (its projection trails
    the stream), asking after `poll` seconds, doubling up to `most` (the tool's wait)."""
    query = json.dumps({"run_id": run_id}).encode()
    deadline = time.monotonic() + 30
    while True:
        reply = await bus.nc.request(subjects.CORE_RUNS_GET, query, timeout=10)
        if not reply.headers or "Nats-Service-Error-Code" not in reply.headers:
            row = json.loads(reply.data)
            if int(row.get("last_seq") or 0) >= seq:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"core never projected {run_id}: {reply.data!r}")
        await asyncio.sleep(poll)
        poll = min(poll * 2, most)


def _rows(label: str, start: list[float], get: list[float], base: dict[str, float]) -> list[Row]:
    s50, s99 = _percentiles(start)
    g50, g99 = _percentiles(get)
    return [
        (f"{label} start_run -> run id p50 (ms)", s50, "NATS projected p50", s50 / base["s50"]),
        (f"{label} start_run -> run id p99 (ms)", s99, "NATS projected p99", s99 / base["s99"]),
        (f"{label} get_run p50 (ms)", g50, "NATS runs.get p50", g50 / base["g50"]),
        (f"{label} get_run p99 (ms)", g99, "NATS runs.get p99", g99 / base["g99"]),
    ]


async def run(nats_url: str, dsn: str) -> list[Row]:
    bus = await Bus.connect(BusSettings(url=nats_url), source="bench")
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=10)
    assert pool is not None
    home = Path(tempfile.mkdtemp(prefix="nxbench-mcp-"))
    env = _server_env(home, nats_url)
    settings = CoreSettings(
        database_url=dsn, memory_enabled=False, health_port=None, fetch_timeout=0.5
    )
    try:
        await ensure_streams(bus.js)
        async with CoreApp(settings, bus=bus, pool=pool) as app:
            await apply_agent(bus, AGENT)
            assert app.catalog_runner is not None
            catalog_last = (await bus.js.stream_info(CATALOG)).state.last_seq
            await app.catalog_runner.wait_until(CATALOG, catalog_last, within=30)
            known_run = f"bench-known-{secrets.token_hex(4)}"
            ack = await bus.publish(
                subjects.run_event(known_run, "requested"), RunRequested(agent_id=AGENT_ID)
            )
            await _projected(bus, known_run, ack.seq, poll=0.005, most=0.05)

            npub, ns, nfine, ng = await _nats_figures(bus, known_run)
            stdio = StdioServerParameters(command=NEXUS, args=["mcp", "serve"], env=env)
            with (home / "mcp-stdio.log").open("w") as errlog:
                async with Client(stdio_client(stdio, errlog=errlog)) as client:
                    ss, sg = await _mcp_figures(client, known_run)
            async with _http_server(home, env) as (url, token):
                http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                async with http, Client(streamable_http_client(url, http_client=http)) as client:
                    hs, hg = await _mcp_figures(client, known_run)
    finally:
        with contextlib.suppress(Exception):
            await pool.close()
        with contextlib.suppress(Exception):
            await bus.close()
        shutil.rmtree(home, ignore_errors=True)
    p50, p99 = _percentiles(npub)
    f50, f99 = _percentiles(nfine)
    n50, n99 = _percentiles(ns)
    g50, g99 = _percentiles(ng)
    base = {"s50": n50, "s99": n99, "g50": g50, "g99": g99}
    return [
        ("NATS publish RunRequested (PubAck) p50 (ms)", p50, "", 1.0),
        ("NATS publish RunRequested (PubAck) p99 (ms)", p99, "", 1.0),
        ("NATS publish + core has projected it p50 (ms)", n50, "", 1.0),
        ("NATS publish + core has projected it p99 (ms)", n99, "", 1.0),
        ("  the same, asking every 2 ms p50 (ms)", f50, "", 1.0),
        ("  the same, asking every 2 ms p99 (ms)", f99, "", 1.0),
        ("NATS core runs.get request p50 (ms)", g50, "", 1.0),
        ("NATS core runs.get request p99 (ms)", g99, "", 1.0),
        *_rows("MCP stdio", ss, sg, base),
        *_rows("MCP HTTP", hs, hg, base),
    ]
