"""MCP servers as tools: start the definition's servers, offer their granted tools to the
model as function tools, and call them with timeouts, restarts and redaction.

Each server is owned by one asyncio task (the `mcp` client is built on anyio, whose cancel
scopes must be entered and left in the same task); calls come from the agent loop. The
registry judges calls exactly as for built-in tools (grants, approvals); this module only
names, lists and runs them. Outcomes never raise: a timeout, a tool error or a crashed
server is a failed outcome the model can read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import anyio.abc
from nexus_events.events.runs import McpServerUnavailable
from nexus_events.events.specs import McpServerSpec
from nexus_events.runtime.program_paths import named_files
from opentelemetry import trace

from nexus_runner.config import RunnerSettings
from nexus_runner.errors import ToolError
from nexus_runner.safety import REDACTED, redact
from nexus_runner.tool_paths import executable_paths, interpreter_paths
from nexus_runner.tool_sandbox import UNSANDBOXED, ToolSandbox
from nexus_runner.tools.mcp_unavailable import (
    ServerUnavailable,
    first_stderr_line,
    missing_secrets,
    start_failure,
)

if TYPE_CHECKING:
    from mcp import Client, MCPError
    from mcp import types as mcp_types

    from nexus_runner.tools.mcp_stdio import stdio_transport

log = logging.getLogger(__name__)

# Tool span attributes of an MCP call.
MCP_SERVER = "nexus.mcp.server"
MCP_TOOL = "nexus.mcp.tool"

PREFIX = "mcp_"
# OpenAI function names: [A-Za-z0-9_-]{1,64}.
MAX_NAME = 64
_INVALID = re.compile(r"[^A-Za-z0-9_-]")
# Characters of the sha256 hex digest that disambiguate a cut or colliding name.
_HASH_CHARS = 8
# Characters of a crashed server's stderr quoted (redacted) to the model.
_STDERR_TAIL = 400
# Seconds past a call's timeout before the runner stops waiting even for the cancel to go out.
_CANCEL_GRACE = 5.0
# Seconds a closing connection gets before its owner task is cancelled (which still kills
# the process group: the transport's exit is shielded).
_CLOSE_GRACE = 5.0


def tool_name(server: str, tool: str, taken: set[str]) -> str:
    """The function name of `server`'s `tool`: ``mcp_<server>__<tool>``, invalid characters
    replaced by ``_``; if longer than 64 characters or already `taken`, cut and suffixed
    with a hash of the real pair, so it stays unique and stable across runs."""
    name = _INVALID.sub("_", f"{PREFIX}{server}__{tool}")
    if len(name) <= MAX_NAME and name not in taken:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{name[: MAX_NAME - _HASH_CHARS - 1]}_{digest}"


def parameters_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """A tool's input schema as OpenAI accepts it: an object with ``properties``."""
    out = dict(schema or {})
    out.setdefault("type", "object")
    if not isinstance(out.get("properties"), dict):
        out["properties"] = {}
    out.pop("title", None)
    return out


def import_mcp_client() -> None:
    """Import the MCP client (about 0.4 s) when a run starts its first server: a run without
    MCP servers, most of them, never loads it (a runner's cold start, issue 41)."""
    global Client, MCPError, mcp_types, stdio_transport  # noqa: PLW0603 - bound once, here
    from mcp import Client, MCPError
    from mcp import types as mcp_types

    from nexus_runner.tools.mcp_stdio import stdio_transport


def result_text(result: mcp_types.CallToolResult) -> str:
    """What the model reads of a tool result: its text parts, else its structured content."""
    import_mcp_client()
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, mcp_types.TextContent):
            parts.append(item.text)
        else:
            parts.append(f"[{item.type} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts) if parts else "(no output)"


def _leaf(exc: Exception) -> Exception:
    """The first real error inside the (nested) exception groups anyio's task groups raise."""
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def granted(names: list[str], tool: str) -> bool:
    return "*" in names or tool in names


@dataclass(frozen=True)
class McpTool:
    """One granted tool of one server, as the model sees it."""

    function: str
    server: str
    tool: str
    description: str
    parameters: dict[str, Any]
    auto_approved: bool
    # The server annotates it read-only (MCP `readOnlyHint`): offered in plan mode.
    read_only: bool = False
    # The server annotates it destructive (MCP `destructiveHint`; None: not annotated): it
    # always asks (nexus_runner.guard.policy).
    destructive_hint: bool | None = None

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.function,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class McpOutcome:
    ok: bool
    output: str


class McpStartFailed(Exception):  # noqa: N818 - internal signal, never leaves this module
    """A server did not start or list its tools in time; `unavailable` says why, once known."""

    def __init__(self, message: str, unavailable: ServerUnavailable | None = None) -> None:
        super().__init__(message)
        self.unavailable = unavailable


@dataclass
class McpServer:
    """One server's connection: its owner task, restarts and whether its tools are withdrawn."""

    spec: McpServerSpec
    settings: RunnerSettings
    workspace: Path
    scratch: Path
    env: dict[str, str]
    secrets: list[str]
    restarts: int = 0
    withdrawn: bool = False
    # Where a stdio server runs: the tools' own sandbox, as shell commands.
    sandbox: ToolSandbox = UNSANDBOXED
    argv: list[str] = field(default_factory=list)
    listing: list[mcp_types.Tool] = field(default_factory=list)
    _client: Client | None = None
    _process: anyio.abc.Process | None = None
    _owner: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _ready: asyncio.Future[None] | None = None
    _restart: asyncio.Task[None] | None = None

    @property
    def startup_timeout(self) -> float:
        return self.spec.startup_timeout or self.settings.mcp_startup_timeout

    @property
    def call_timeout(self) -> float:
        return self.spec.call_timeout or self.settings.mcp_call_timeout

    def redact(self, text: str) -> str:
        for value in self.secrets:
            text = text.replace(value, REDACTED)
        return text

    def _transport(self, stderr: IO[str]) -> Any:
        if self.spec.transport == "http":
            assert self.spec.url is not None
            return self.spec.url
        assert self.spec.command is not None

        def spawned(process: anyio.abc.Process) -> None:
            self._process = process

        return stdio_transport(
            self.argv,
            env=self.env,
            cwd=self.workspace,
            stderr=stderr,
            on_spawn=spawned,
        )

    def command_line(self) -> list[str]:
        """The stdio server's argv: in the tools' sandbox with its program (and that
        program's interpreter and prefix) bound in read-only, its HOME read-write.

        Raises `McpStartFailed` naming what is missing: the program on the server's PATH,
        or the sandbox (NEXUS_TOOL_SANDBOX=on)."""
        assert self.spec.command is not None
        argv = [self.spec.command, *self.spec.args]
        if self.sandbox.mode == "off":
            return argv
        path = self.env.get("PATH", "")
        exe = shutil.which(self.spec.command, path=path)
        if exe is None:
            where = "does not exist" if "/" in self.spec.command else f"is not on its PATH {path}"
            raise McpStartFailed(f"its command {self.spec.command!r} {where}")
        home = Path(self.env["HOME"]) if "HOME" in self.env else None
        try:
            return self.sandbox.command(
                [exe, *self.spec.args],
                workspace=self.workspace,
                home=home,
                cwd=self.workspace,
                # Its program, what its PATH offers (``#!/usr/bin/env python3``), and the
                # files its definition names by absolute path (``python /opt/srv.py``): the
                # operator's definition names them, as it names the program.
                readable=[
                    *executable_paths(Path(exe)),
                    *interpreter_paths(path),
                    *named_files(self.spec.args),
                ],
            )
        except ToolError as exc:
            raise McpStartFailed(str(exc)) from None

    async def start(self) -> None:
        """Start the server and list its tools; raise `McpStartFailed` (redacted message)."""
        import_mcp_client()
        if self.spec.transport == "stdio":
            self.argv = self.command_line()
        self._stop = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready = ready
        # Read its outcome even when nobody waits any more (a start that timed out).
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp:{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.startup_timeout)
        except TimeoutError:
            await self._start_failed(None)
        except (MCPError, OSError, McpStartFailed) as exc:
            await self._start_failed(exc)

    async def _start_failed(self, error: BaseException | None) -> NoReturn:
        """Stop what started, then raise `McpStartFailed` saying why (redacted)."""
        process = self._process
        await self.stop()  # waits for the process: its exit code is known after
        unavailable = start_failure(
            self.spec.name,
            self.spec.command,
            error,
            exit_code=process.returncode if process is not None else None,
            stderr=first_stderr_line(self.scratch / f"{self.spec.name}.stderr"),
            timeout=self.startup_timeout,
        )
        unavailable = dataclasses.replace(unavailable, detail=self.redact(unavailable.detail))
        raise McpStartFailed(unavailable.detail, unavailable) from None

    async def _own(self, ready: asyncio.Future[None]) -> None:
        stderr_path = self.scratch / f"{self.spec.name}.stderr"
        try:
            with stderr_path.open("a") as stderr:
                async with Client(self._transport(stderr), mode="legacy") as client:
                    tools: list[mcp_types.Tool] = []
                    cursor: str | None = None
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if cursor is None:
                            break
                    self.listing = tools
                    self._client = client
                    ready.set_result(None)
                    await self._stop.wait()
        except Exception as group:  # noqa: BLE001 - the server's failure is the caller's outcome
            exc = _leaf(group)
            if not ready.done():
                failure = exc if isinstance(exc, (MCPError, OSError)) else None
                ready.set_exception(failure or McpStartFailed(f"{type(exc).__name__}: {exc}"))
            else:
                log.info("MCP server %s ended: %s", self.spec.name, self.redact(str(exc)))
        finally:
            self._client = None
            if not ready.done():
                ready.set_exception(McpStartFailed("the server closed the connection"))

    def _stderr_note(self) -> str:
        path = self.scratch / f"{self.spec.name}.stderr"
        try:
            tail = path.read_text(errors="replace")[-_STDERR_TAIL:].strip()
        except OSError:
            return ""
        return f"; its stderr ends: {self.redact(tail)}" if tail else ""

    def crashed(self) -> bool:
        """Whether the server's process (stdio) is gone or its connection closed."""
        if self._process is not None and self._process.returncode is not None:
            return True
        return self._owner is None or self._owner.done()

    async def stop(self) -> None:
        """Close the connection; the transport kills the server's whole process group."""
        self._stop.set()
        owner, self._owner = self._owner, None
        if owner is not None:
            if self._ready is None or not self._ready.done():
                owner.cancel()  # still starting: nothing waits on the stop event yet
            # A server that ignores the closed connection is killed by the transport's exit.
            done, _ = await asyncio.wait({owner}, timeout=_CLOSE_GRACE)
            if not done:
                owner.cancel()
                await asyncio.wait({owner})
        self._client = None
        self._process = None

    async def close(self) -> None:
        if self._restart is not None:
            self._restart.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._restart
        await self.stop()

    async def call(self, tool: str, arguments: dict[str, Any]) -> McpOutcome:
        """Call `tool`; failures (timeout, crash, tool error) are failed outcomes."""
        if self._restart is not None:
            try:
                await self._restart
            except McpStartFailed as exc:
                return McpOutcome(False, f"MCP server {self.spec.name} is unavailable: {exc}")
        client = self._client
        if client is None or self.withdrawn:
            return McpOutcome(False, f"MCP server {self.spec.name} is not running")
        try:
            # The client's own timeout cancels the request on the server; the outer bound is
            # for a transport that cannot even deliver that cancel.
            result = await asyncio.wait_for(
                client.call_tool(tool, arguments, read_timeout_seconds=self.call_timeout),
                self.call_timeout + _CANCEL_GRACE,
            )
        except TimeoutError:
            return McpOutcome(False, f"{tool} timed out after {self.call_timeout:g}s")
        except MCPError as exc:
            return McpOutcome(False, await self._failure(tool, exc))
        return McpOutcome(not result.is_error, self.redact(result_text(result)))

    async def _failure(self, tool: str, exc: MCPError) -> str:
        if self.crashed() or exc.code == mcp_types.CONNECTION_CLOSED:
            return await self._on_crash(tool)
        if exc.code == mcp_types.REQUEST_TIMEOUT:  # the client sent the server a cancel
            return f"{tool} timed out after {self.call_timeout:g}s and was cancelled"
        return self.redact(f"MCP error: {exc.message}")

    async def _on_crash(self, tool: str) -> str:
        note = self._stderr_note()
        await self.stop()
        if self.restarts >= self.settings.mcp_max_restarts:
            self.withdrawn = True
            return (
                f"MCP server {self.spec.name} crashed during {tool}{note}. It crashed"
                f" {self.restarts + 1} times; its tools are withdrawn for the rest of this run."
            )
        delay = self.settings.mcp_restart_backoff * (2**self.restarts)
        self.restarts += 1
        self._restart = asyncio.create_task(self._restart_after(delay))
        # A failed restart withdraws the tools; its error is read here if no call awaits it.
        self._restart.add_done_callback(lambda t: t.cancelled() or t.exception())
        return (
            f"MCP server {self.spec.name} crashed during {tool}{note}. It is being restarted"
            f" (restart {self.restarts} of {self.settings.mcp_max_restarts}); the call was not"
            " completed."
        )

    async def _restart_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            await self.start()
        except McpStartFailed:
            self.withdrawn = True
            raise
        finally:
            self._restart = None


class McpTools:
    """The run's MCP servers and their granted tools, by function name."""

    def __init__(self, servers: list[McpServer], scratch: Path | None = None) -> None:
        self.servers = {s.spec.name: s for s in servers}
        self.scratch = scratch
        self.tools: dict[str, McpTool] = {}
        self.notes: list[str] = []
        # Servers of the definition that did not start, by name.
        self.unavailable: dict[str, ServerUnavailable] = {}

    @classmethod
    async def start(
        cls,
        specs: list[McpServerSpec],
        settings: RunnerSettings,
        workspace: Path,
        sandbox: ToolSandbox = UNSANDBOXED,
    ) -> McpTools:
        """Start every server (concurrently); a server that fails is left out, in `unavailable`
        and with a note for the model."""
        scratch = Path(tempfile.mkdtemp(prefix="nexus-mcp-"))
        servers: list[McpServer] = []
        unavailable: list[ServerUnavailable] = []
        for spec in specs:
            home = scratch / f"{spec.name}.home"
            home.mkdir(mode=0o700, exist_ok=True)
            env, secrets, missing = _environment(spec, settings, home)
            if sandbox.bwrap is not None:
                env["TMPDIR"] = "/tmp"  # noqa: S108 - the sandbox's private one
            if missing:
                unavailable.append(missing_secrets(spec.name, missing))
                continue
            servers.append(
                McpServer(spec, settings, workspace, scratch, env, secrets, sandbox=sandbox)
            )
        try:
            results = await asyncio.gather(*(s.start() for s in servers), return_exceptions=True)
        except BaseException:  # cancelled while starting: no server may outlive the run
            await asyncio.shield(cls(servers, scratch).close())
            raise
        started = []
        for server, result in zip(servers, results, strict=True):
            if isinstance(result, BaseException):
                why = getattr(result, "unavailable", None) or start_failure(
                    server.spec.name, server.spec.command, result, exit_code=None, stderr=""
                )
                unavailable.append(dataclasses.replace(why, detail=redact(why.detail)))
            else:
                started.append(server)
        tools = cls(started, scratch)
        tools.unavailable = {u.server: u for u in unavailable}
        tools.notes = [u.note() for u in unavailable]
        tools._index()
        return tools

    def _index(self) -> None:
        for server in self.servers.values():
            for tool in server.listing:
                if not granted(server.spec.tools, tool.name):
                    continue
                name = tool_name(server.spec.name, tool.name, set(self.tools))
                self.tools[name] = McpTool(
                    function=name,
                    server=server.spec.name,
                    tool=tool.name,
                    description=(tool.description or tool.name)[:1024],
                    parameters=parameters_schema(tool.input_schema),
                    auto_approved=granted(server.spec.auto_approve, tool.name),
                    read_only=bool(tool.annotations and tool.annotations.read_only_hint),
                    destructive_hint=(
                        tool.annotations.destructive_hint if tool.annotations else None
                    ),
                )

    def available(self, function: str) -> McpTool | None:
        """The tool behind `function`, unless unknown or its server's tools are withdrawn."""
        tool = self.tools.get(function)
        if tool is None or self.servers[tool.server].withdrawn:
            return None
        return tool

    def unavailable_note(self, function: str) -> str | None:
        """Why `function` cannot be called, if it names a tool of a server that did not start
        (``mcp_<server>__…``); None otherwise."""
        for name, why in self.unavailable.items():
            if function.startswith(f"{PREFIX}{name}__"):
                return why.note()
        return None

    def names(self) -> list[str]:
        """The function names of the granted tools still offered (not withdrawn)."""
        return [name for name in self.tools if self.available(name) is not None]

    def specs(self, *, read_only: bool = False) -> list[dict[str, Any]]:
        """Specs of the available tools (`read_only`: only those annotated read-only)."""
        return [
            self.tools[name].spec()
            for name in self.names()
            if self.tools[name].read_only or not read_only
        ]

    async def call(self, function: str, arguments: dict[str, Any]) -> McpOutcome:
        tool = self.available(function)
        if tool is None:
            return McpOutcome(False, f"tool {function!r} is no longer available")
        # The loop's tool span is current: say which server and tool the function was.
        trace.get_current_span().set_attributes({MCP_SERVER: tool.server, MCP_TOOL: tool.tool})
        return await self.servers[tool.server].call(tool.tool, arguments)

    @classmethod
    @contextlib.asynccontextmanager
    async def started(
        cls,
        specs: list[McpServerSpec],
        settings: RunnerSettings,
        workspace: Path,
        log_line: Callable[[str, str], Awaitable[None]],
        record: Callable[[McpServerUnavailable], Awaitable[None]] | None = None,
        *,
        sandbox: ToolSandbox = UNSANDBOXED,
    ) -> AsyncIterator[McpTools]:
        """`start`; a server left out is a log line and (`record`) an `mcp_server_unavailable`
        event on the run; `close` on the way out."""
        tools = await cls.start(specs, settings, workspace, sandbox)
        try:
            for why in tools.unavailable.values():
                await log_line("runner", why.note())
                if record is not None:
                    await record(why.event())
            yield tools
        finally:
            await tools.close()

    async def close(self) -> None:
        """Stop every server (their process groups are gone when this returns)."""
        await asyncio.gather(*(s.close() for s in self.servers.values()), return_exceptions=True)
        if self.scratch is not None:  # the servers' stderr files may hold secrets
            shutil.rmtree(self.scratch, ignore_errors=True)


def _environment(
    spec: McpServerSpec, settings: RunnerSettings, home: Path
) -> tuple[dict[str, str], list[str], list[str]]:
    """(environment, secret values, missing secret names) of a stdio server: a fixed PATH,
    a private HOME, and the named secrets; nothing from the runner's environment.

    HOME is a scratch directory outside the workspace, so caches a server writes there
    (npm, uv, pip) never end up in the run's commit, and it goes when the run ends."""
    env = {"PATH": settings.mcp_path, "HOME": str(home), "LANG": "C.UTF-8"}
    values: list[str] = []
    missing: list[str] = []
    for var, secret_name in spec.env.items():
        secret = settings.mcp_secrets.get(secret_name)
        if secret is None:
            missing.append(secret_name)
            continue
        env[var] = secret.get_secret_value()
        if env[var]:
            values.append(env[var])
    return env, values, sorted(set(missing))
