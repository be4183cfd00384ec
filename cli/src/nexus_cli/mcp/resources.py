"""Resources (runs, the board, agents, flows) and their subscriptions.

A subscription is fed from the stream, not by polling: while someone listens to a resource, an
ordered consumer (new messages only) on its subjects turns each event into a
``notifications/resources/updated`` (a run's own events for ``nexus://runs/{id}``; any run or
task event for ``nexus://board``). Listeners of one URI share one consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.subscriptions import ListenHandler, ResourceUpdated, SubscriptionBus
from mcp_types import (
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)
from nats.js.api import DeliverPolicy
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, TASKS
from nexus_events.errors import InvalidSubject

from nexus_cli.errors import CliError, ExitCode
from nexus_cli.mcp.scoping import visible_agent, visible_flow, visible_run
from nexus_cli.mcp.state import Nexus
from nexus_cli.mcp.tools import run_view, wait_projected

log = logging.getLogger("nexus_cli.mcp")

RUN_PREFIX = "nexus://runs/"
BOARD = "nexus://board"


def sources(uri: str) -> list[tuple[str, str]]:
    """The (stream, filter subject) pairs whose events change the resource at `uri`; none for
    a URI no event changes (a subscription to it is honoured and never fires)."""
    if uri == BOARD:
        return [
            (RUNS, subjects.family_filter(subjects.Family.RUN)),
            (TASKS, subjects.family_filter(subjects.Family.TASK)),
        ]
    if uri.startswith(RUN_PREFIX):
        try:
            run_id = subjects.validate_token(uri.removeprefix(RUN_PREFIX), "run id")
        except InvalidSubject:
            return []
        return [(RUNS, subjects.run_events_filter(run_id))]
    return []


class Watchers:
    """One stream consumer per subscribed URI, shared by its listeners (reference counted)."""

    def __init__(self, nexus: Nexus, bus: SubscriptionBus) -> None:
        self._nexus = nexus
        self._bus = bus
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._counts: dict[str, int] = {}
        self._ready: dict[str, asyncio.Event] = {}
        # 2025-era clients (resources/subscribe): the connections told of each URI.
        self._connections: dict[str, dict[int, Any]] = {}

    @property
    def nexus(self) -> Nexus:
        return self._nexus

    @property
    def watched(self) -> dict[str, int]:
        return dict(self._counts)

    async def acquire(self, uri: str) -> None:
        pairs = sources(uri)
        if not pairs:
            return
        self._counts[uri] = self._counts.get(uri, 0) + 1
        if uri not in self._tasks:
            ready = asyncio.Event()
            self._ready[uri] = ready
            self._tasks[uri] = asyncio.create_task(self._watch(uri, pairs, ready))
        # The consumers exist before the listener is acknowledged: nothing after is missed.
        await self._ready[uri].wait()

    async def subscribe_connection(self, uri: str, connection: Any) -> None:
        """A 2025-era client's resources/subscribe: tell `connection` until it unsubscribes
        (or can no longer be told)."""
        told = self._connections.setdefault(uri, {})
        if not sources(uri) or id(connection) in told:
            return
        await self.acquire(uri)
        told[id(connection)] = connection

    def unsubscribe_connection(self, uri: str, connection: Any) -> None:
        if self._connections.get(uri, {}).pop(id(connection), None) is not None:
            self.release(uri)

    async def _notify(self, uri: str) -> None:
        await self._bus.publish(ResourceUpdated(uri=uri))
        for key, connection in list(self._connections.get(uri, {}).items()):
            try:
                await connection.send_resource_updated(uri)
            except Exception:  # noqa: BLE001 - whatever a gone client raises, it is gone
                self._connections[uri].pop(key, None)
                self.release(uri)

    def release(self, uri: str) -> None:
        if uri not in self._counts:
            return
        self._counts[uri] -= 1
        if self._counts[uri] <= 0:
            del self._counts[uri]
            self._ready.pop(uri, None)
            task = self._tasks.pop(uri, None)
            if task is not None:
                task.cancel()

    async def _watch(self, uri: str, pairs: list[tuple[str, str]], ready: asyncio.Event) -> None:
        js = self._nexus.session.bus.js
        subs = []
        changed = asyncio.Event()
        latest = 0
        run_id = uri.removeprefix(RUN_PREFIX) if uri.startswith(RUN_PREFIX) else None

        async def on_msg(msg: Any) -> None:
            nonlocal latest
            latest = max(latest, msg.metadata.sequence.stream)
            changed.set()

        try:
            for stream, subject in pairs:
                subs.append(
                    await js.subscribe(
                        subject,
                        stream=stream,
                        ordered_consumer=True,
                        deliver_policy=DeliverPolicy.NEW,
                        cb=on_msg,
                    )
                )
            ready.set()
            while True:
                await changed.wait()
                changed.clear()
                if run_id is not None:
                    await wait_projected(self._nexus.session, run_id, latest)
                await self._notify(uri)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watching %s failed", uri)
            # The next listener of this URI starts a new consumer.
            if self._tasks.get(uri) is asyncio.current_task():
                del self._tasks[uri]
            ready.set()
        finally:
            for sub in subs:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()

    def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        self._counts.clear()


async def watchable(watchers: Watchers, ctx: ServerRequestContext[Any, Any], uri: str) -> bool:
    """Whether the caller may be told of changes to `uri`: a scoped caller not of a run it
    cannot see (nor of one core does not know yet, whose id a run of another agent may take).
    Such a subscription is honoured and never fires, as for a URI no event changes."""
    nexus = watchers.nexus
    try:
        who = nexus.identity_of(getattr(ctx.request, "headers", None))
        if not who.scoped or not uri.startswith(RUN_PREFIX):
            return True
        await visible_run(await nexus.session_for(who), who, uri.removeprefix(RUN_PREFIX))
    except (CliError, PermissionError):
        return False
    return True


def listen_handler(
    watchers: Watchers, inner: ListenHandler
) -> Callable[
    [ServerRequestContext[Any, Any], SubscriptionsListenRequestParams],
    Awaitable[SubscriptionsListenResult],
]:
    """`subscriptions/listen` that starts the stream consumers of the URIs it asks for."""

    async def listen(
        ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        uris = list(params.notifications.resource_subscriptions or [])
        acquired: list[str] = []
        try:
            for uri in uris:
                if await watchable(watchers, ctx, uri):
                    await watchers.acquire(uri)
                    acquired.append(uri)
            return await inner(ctx, params)
        finally:
            for uri in acquired:
                watchers.release(uri)

    return listen


def legacy_handlers(
    watchers: Watchers,
) -> tuple[
    Callable[[ServerRequestContext[Any, Any], SubscribeRequestParams], Awaitable[EmptyResult]],
    Callable[[ServerRequestContext[Any, Any], UnsubscribeRequestParams], Awaitable[EmptyResult]],
]:
    """resources/subscribe and resources/unsubscribe for clients of the 2025 protocol."""

    def connection_of(ctx: ServerRequestContext[Any, Any]) -> Any:
        # The SDK has no public handle on the connection, which outlives this request and
        # carries the notifications later (its standalone channel).
        return ctx.session._connection

    async def subscribe(
        ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        if await watchable(watchers, ctx, str(params.uri)):
            await watchers.subscribe_connection(str(params.uri), connection_of(ctx))
        return EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        watchers.unsubscribe_connection(str(params.uri), connection_of(ctx))
        return EmptyResult()

    return subscribe, unsubscribe


def _json(data: Any) -> str:
    return json.dumps(data, default=str, indent=1)


async def _read(nexus: Nexus, ctx: Context, read: Callable[[Any], Awaitable[Any]]) -> str:
    try:
        s = await nexus.session_for(nexus.identity(ctx))
        return _json(await read(s))
    except CliError as exc:
        if exc.code is ExitCode.NOT_FOUND:
            raise ResourceNotFoundError(exc.message) from None
        raise ResourceError(exc.message) from None


def register_resources(server: MCPServer, nexus: Nexus) -> None:
    @server.resource(
        "nexus://runs/{run_id}",
        name="run",
        description="A run (as core projects it) and its recent events.",
        mime_type="application/json",
    )
    async def run_resource(run_id: str, ctx: Context) -> str:
        try:
            return _json(await run_view(nexus, nexus.identity(ctx), run_id))
        except CliError as exc:
            if exc.code is ExitCode.NOT_FOUND:
                raise ResourceNotFoundError(exc.message) from None
            raise ResourceError(exc.message) from None

    @server.resource(
        BOARD,
        name="board",
        description="The board: tasks by column, with their runs.",
        mime_type="application/json",
    )
    async def board_resource() -> str:
        # Listed from here; read by `server.NexusMCP.read_resource`, which knows the caller (a
        # static resource gets no request context from the SDK). Reached only if that were
        # bypassed: then as the server's own, unscoped, connection.
        try:
            return _json(await nexus.session.query(subjects.CORE_BOARD_GET, {}))
        except CliError as exc:
            raise ResourceError(exc.message) from None

    @server.resource(
        "nexus://agents/{agent_id}",
        name="agent",
        description="An agent definition from the catalog.",
        mime_type="application/json",
    )
    async def agent_resource(agent_id: str, ctx: Context) -> str:
        who = nexus.identity(ctx)
        return await _read(nexus, ctx, lambda s: visible_agent(s, who, agent_id))

    @server.resource(
        "nexus://flows/{flow_id}",
        name="flow",
        description="A flow definition from the catalog.",
        mime_type="application/json",
    )
    async def flow_resource(flow_id: str, ctx: Context) -> str:
        who = nexus.identity(ctx)
        return await _read(nexus, ctx, lambda s: visible_flow(s, who, flow_id))
