"""The host functions a sandboxed tool may call, each checking its capability at every call.

A call without the token, over a limit, or carrying a secret value of the run ends the tool
call with an error naming what was missing (`Violation`): the JavaScript cannot catch its way
past a refusal, the host refuses every later call and the epoch deadline is pulled in so the
guest stops within a tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import httpx
from nexus_events.contract.capabilities import Grants, Kind
from nexus_events.contract.subjects import validate_token
from nexus_events.events import RunEgress, SandboxLimits

from nexus_runner import safety
from nexus_runner.containment import is_secret_file
from nexus_runner.errors import ToolError
from nexus_runner.workspace import Workspace

MAX_FILE_BYTES = 1_000_000
MAX_VALUE_BYTES = 64_000
MAX_HTTP_BYTES = 1_000_000
# Seconds a tool call waits for its egress event to be handed to the publisher.
RECORD_TIMEOUT = 5.0
T = TypeVar("T")

Approve = Callable[[str, str], Coroutine[Any, Any, bool]]
MemoryRead = Callable[[str, str], Coroutine[Any, Any, list[dict[str, Any]]]]
RecordEgress = Callable[[RunEgress], Coroutine[Any, Any, None]]


class Violation(Exception):  # noqa: N818 - reads as what happened
    """A host call the tool may not make: ends the tool call with this message."""


@dataclass(frozen=True)
class Emitted:
    tool: str
    name: str
    payload: Any


@dataclass(frozen=True)
class StateCap:
    """Run-wide bounds of the key/value state, shared by all sandboxed tools and hook scripts
    of a run (`state_mutations` bounds one call only: many calls could grow it without end)."""

    keys: int = 1_000
    bytes: int = 16 << 20


def _size(key: str, value: str) -> int:
    return len(key.encode(errors="surrogatepass")) + len(value.encode(errors="surrogatepass"))


@dataclass
class HostEnv:
    """What a run's sandboxed tools act on (one per run, shared by its tools)."""

    workspace: Workspace
    secrets: safety.SecretRegistry
    # The loop the runner's own I/O belongs to (NATS, approvals): host calls that need it
    # hop there from the sandbox's thread.
    loop: asyncio.AbstractEventLoop | None
    approve: Approve | None = None
    memory_read: MemoryRead | None = None
    state: dict[str, str] = field(default_factory=dict)
    state_cap: StateCap = field(default_factory=StateCap)
    state_bytes: int = 0  # of keys and JSON values in `state`, UTF-8
    emitted: list[Emitted] = field(default_factory=list)
    http_transport: httpx.AsyncBaseTransport | None = None
    # Each `nexus.http.fetch`, allowed or refused, is an `egress` run event through this (on
    # the runner's loop); None: not recorded (no run, e.g. a test of the sandbox alone).
    record_egress: RecordEgress | None = None


class Clock:
    """Wall time of one call, not counting the time it is suspended (awaiting a human)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.started = time.monotonic()
        self.paused = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.started - self.paused

    def remaining(self) -> float:
        return self.limit - self.elapsed()


class Host:
    """The host side of one tool call."""

    def __init__(
        self,
        env: HostEnv,
        tool: str,
        grants: Grants,
        limits: SandboxLimits,
        *,
        on_trip: Callable[[], None],
        on_resume: Callable[[float], None],
    ) -> None:
        self.env = env
        self.tool = tool
        self.grants = grants
        self.limits = limits
        self.clock = Clock(limits.wall_seconds)
        self.calls = 0
        self.mutations = 0
        self.violation: str | None = None
        self.status: Literal["running", "suspended"] = "running"
        self.suspensions = 0
        self._on_trip = on_trip  # pulls the epoch deadline in: the guest stops at once
        self._on_resume = on_resume  # sets it again after a suspension

    # -- checks --
    def _refuse(self, message: str) -> Violation:
        if self.violation is None:
            self.violation = message
        self._on_trip()
        return Violation(self.violation)

    def _enter(self) -> None:
        if self.violation is not None:
            raise Violation(self.violation)
        self.calls += 1
        if self.calls > self.limits.host_calls:
            raise self._refuse(f"host-call limit of {self.limits.host_calls} reached")

    def _need(self, kind: Kind, value: str) -> None:
        if not self.grants.allows(kind, value):
            raise self._refuse(f"missing capability {kind}:{value} (declare a token granting it)")

    def _no_secrets(self, *values: Any) -> None:
        text = json.dumps(values, ensure_ascii=False, default=str)
        if self.env.secrets.contains(text):
            raise self._refuse("refused: a value this run keeps secret would leave")

    def _sized(self, value: Any, what: str) -> str:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            raise self._refuse(f"{what} must be JSON") from None
        if len(text) > MAX_VALUE_BYTES:
            raise self._refuse(f"{what} is larger than {MAX_VALUE_BYTES} bytes")
        return text

    def _path(self, path: Any) -> str:
        if not isinstance(path, str):
            raise self._refuse("a path must be a string")
        return path

    async def _on_main(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Run `coro` on the runner's loop, bounded by the call's remaining wall time."""
        if self.env.loop is None:
            coro.close()
            raise self._refuse("this host call is not available here")
        future = asyncio.run_coroutine_threadsafe(coro, self.env.loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            future.cancel()
            raise self._refuse(
                f"wall time limit of {self.limits.wall_seconds:g}s exceeded in a host call"
            ) from None

    # -- the functions, as the guest sees them (sync ones run on the sandbox's thread) --
    def read(self, path: Any) -> str:
        """The token's glob is matched against the canonical path of the file actually opened
        (nexus_runner.beneath), before a byte is read."""
        self._enter()
        try:
            rel, data = self.env.workspace.read_bytes(
                self._path(path),
                MAX_FILE_BYTES,
                check=lambda rel: self._need("workspace:read", rel),
            )
        except ToolError as exc:  # PathEscape, hard links, any OSError on the way
            raise self._refuse(str(exc)) from None
        text = data.decode(errors="replace")
        if is_secret_file(PurePosixPath(rel).name):
            self.env.secrets.add_text(text)
        return text

    def write(self, path: Any, content: Any) -> int:
        """Checked like `read`, before any directory or the file is created or truncated."""
        self._enter()
        where = self._path(path)
        if not isinstance(content, str):
            raise self._refuse("content must be a string")
        if len(content) > MAX_FILE_BYTES:
            raise self._refuse(f"content is larger than {MAX_FILE_BYTES} bytes")
        try:
            self.env.workspace.write_text(
                where, content, check=lambda rel: self._need("workspace:write", rel)
            )
        except ToolError as exc:
            raise self._refuse(str(exc)) from None
        return len(content)

    def state_get(self, key: Any) -> Any:
        self._enter()
        if not isinstance(key, str):
            raise self._refuse("a state key must be a string")
        self._need("state:read", key)
        value = self.env.state.get(key)
        return None if value is None else json.loads(value)

    def state_set(self, key: Any, value: Any) -> None:
        self._enter()
        if not isinstance(key, str):
            raise self._refuse("a state key must be a string")
        self._need("state:write", key)
        self.mutations += 1
        if self.mutations > self.limits.state_mutations:
            raise self._refuse(f"state mutation limit of {self.limits.state_mutations} reached")
        text = self._sized(value, f"state {key}")
        env = self.env
        cap = env.state_cap
        old = env.state.get(key)
        if old is None and len(env.state) >= cap.keys:
            raise self._refuse(f"state limit of {cap.keys} keys reached (run-wide)")
        size = env.state_bytes + _size(key, text) - (0 if old is None else _size(key, old))
        if size > cap.bytes:
            raise self._refuse(f"state limit of {cap.bytes} bytes reached (run-wide)")
        env.state[key] = text
        env.state_bytes = size

    def emit(self, name: Any, payload: Any) -> None:
        self._enter()
        if not isinstance(name, str):
            raise self._refuse("an event name must be a string")
        try:
            validate_token(name.replace(".", "_"), "event name")
        except ValueError as exc:
            raise self._refuse(str(exc)) from None
        self._need("events:emit", name)
        self._sized(payload, f"event {name}")
        self._no_secrets(payload)
        self.env.emitted.append(Emitted(self.tool, name, payload))

    def now(self) -> str:
        """The only clock the guest has."""
        self._enter()
        return datetime.now(UTC).isoformat()

    async def memory(self, scope: Any, query: Any) -> list[dict[str, Any]]:
        self._enter()
        if not isinstance(scope, str) or not isinstance(query, str):
            raise self._refuse("memory.read(scope, query) takes two strings")
        self._need("memory:read", scope)
        if self.env.memory_read is None:
            raise self._refuse("memory reading is not available to this run")
        return await self._on_main(self.env.memory_read(scope, query), self.clock.remaining())

    async def http(self, url: Any, options: Any) -> dict[str, Any]:
        self._enter()
        if not isinstance(url, str):
            raise self._refuse("a URL must be a string")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self._refuse(f"{url!r} is not an http(s) URL")
        opts = options if isinstance(options, dict) else {}
        method = str(opts.get("method", "GET")).upper()
        started = time.monotonic()
        try:
            self._need("http", parts.hostname)
            headers = opts.get("headers") or {}
            body = opts.get("body")
            if not isinstance(headers, dict) or not (body is None or isinstance(body, str)):
                raise self._refuse("http options: headers is an object, body a string")
            self._no_secrets(url, headers, body)
        except Violation as exc:
            await self._record_http(url, method, started, refused=str(exc))
            raise
        result, sent, received = await self._on_main(
            self._request(method, url, {str(k): str(v) for k, v in headers.items()}, body),
            self.clock.remaining(),
        )
        await self._record_http(url, method, started, result["status"], sent, received)
        return result

    async def _request(
        self, method: str, url: str, headers: dict[str, str], body: str | None
    ) -> tuple[dict[str, Any], int, int]:
        # The runner makes the request: no proxy from the environment, no redirect to a host
        # the token does not name.
        async with httpx.AsyncClient(
            transport=self.env.http_transport, trust_env=False, follow_redirects=False
        ) as client:
            response = await client.request(method, url, headers=headers, content=body)
        result = {
            "status": response.status_code,
            "headers": dict(response.headers),
            "body": response.text[:MAX_HTTP_BYTES],
        }
        return result, len((body or "").encode()), len(response.content)

    async def _record_http(  # noqa: PLR0917 - one event's fields
        self,
        url: str,
        method: str,
        started: float,
        status: int | None = None,
        sent: int = 0,
        received: int = 0,
        *,
        refused: str | None = None,
    ) -> None:
        """The same `egress` event as the tools' proxy records (via "sandbox")."""
        record, loop = self.env.record_egress, self.env.loop
        if record is None or loop is None:
            return
        parts = urlsplit(url)
        scheme = "https" if parts.scheme == "https" else "http"
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            port = 0
        event = RunEgress(
            via="sandbox",
            tool=self.tool,
            scheme=scheme,
            host=(parts.hostname or "")[:253],
            port=port,
            method=method[:16],
            path=(parts.path or "/")[:1000],
            allowed=refused is None,
            reason=refused or f"capability http:{parts.hostname}",
            status=status,
            bytes_up=sent,
            bytes_down=received,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        future = asyncio.run_coroutine_threadsafe(record(event), loop)
        with contextlib.suppress(TimeoutError):  # a stuck bus never holds the tool up
            await asyncio.wait_for(asyncio.wrap_future(future), RECORD_TIMEOUT)

    async def approve(self, reason: Any) -> bool:
        """Suspends the call until a human decides; wall time does not run meanwhile."""
        self._enter()
        if self.env.approve is None or self.env.loop is None:
            raise self._refuse("approvals are not available to this run")
        suspended_at = time.monotonic()
        self.status = "suspended"
        self.suspensions += 1
        try:
            future = asyncio.run_coroutine_threadsafe(
                self.env.approve(self.tool, str(reason)[:2000]), self.env.loop
            )
            granted = await asyncio.wrap_future(future)
        finally:
            self.status = "running"
            self.clock.paused += time.monotonic() - suspended_at
            self._on_resume(self.clock.remaining())
        return bool(granted)
