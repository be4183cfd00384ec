"""Wiring: the MCP server (tools, resources, subscriptions, prompt) and its two transports."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp_types import (
    CallToolResult,
    InputRequiredResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    UnsubscribeRequestParams,
)
from nexus_events.transport.micro import one_line
from pydantic import ValidationError

from nexus_cli.errors import CliError
from nexus_cli.mcp.auth import Identity
from nexus_cli.mcp.prompts import register_prompts
from nexus_cli.mcp.resources import (
    BOARD,
    Watchers,
    legacy_handlers,
    listen_handler,
    register_resources,
)
from nexus_cli.mcp.state import Nexus
from nexus_cli.mcp.tools import board_view, needs, register_tools

log = logging.getLogger("nexus_cli.mcp")

# Bytes the JSON of one call's arguments may take: a task's instructions fit many times over.
MAX_ARGUMENT_BYTES = 64 * 1024
INSTRUCTIONS = (
    "Nexus runs AI agents and flows of agents. Start work with start_run or start_flow,"
    " watch it with follow_run or the nexus://runs/{run_id} resource, answer what it asks"
    " with list_approvals and answer_approval."
)


def _argument_error(tool: str, exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "arguments"
    return f"invalid arguments for {tool}: {where}: {one_line(first['msg'])}"


class NexusMCP(MCPServer[Any]):
    """MCPServer whose every tool failure is one line: an unknown tool, oversized or mistyped
    arguments, a scope the caller lacks, whatever a tool raises."""

    def __init__(self, nexus: Nexus, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nexus = nexus

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if self._tool_manager.get_tool(name) is None:
            raise ToolError(f"unknown tool {name!r}")
        size = len(json.dumps(arguments, default=str).encode())
        if size > MAX_ARGUMENT_BYTES:
            raise ToolError(
                f"arguments of {name} are {size} bytes, over the {MAX_ARGUMENT_BYTES}-byte limit"
            )
        try:
            who: Identity = self.nexus.identity(context)
        except PermissionError as exc:
            raise ToolError(str(exc)) from None
        scope = needs(name)
        if not who.may(scope):
            log.info("refused %s to %s (scope %s)", name, who.name, who.scope)
            raise ToolError(f"scope {who.scope} may not call {name} (needs {scope})")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            log.exception("tool %s failed", name, exc_info=exc.__cause__)
            raise ToolError(f"{name} failed unexpectedly (see the server's log)") from None
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_argument_error(name, exc.__cause__)) from None
            text = one_line(str(exc)).removeprefix(f"Error executing tool {name}: ")
            raise ToolError(text) from None

    async def read_resource(
        self, uri: Any, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        """The board is read here, as the caller: the SDK gives a static resource's function
        no request context, so it could not filter the board by the caller's agents."""
        if str(uri) != BOARD:
            return await super().read_resource(uri, context)
        try:
            who = self.nexus.identity(context)
            board = await board_view(self.nexus, who)
        except PermissionError as exc:
            raise ResourceError(str(exc)) from None
        except CliError as exc:
            raise ResourceError(exc.message) from None
        text = json.dumps(board, default=str, indent=1)
        return [ReadResourceContents(content=text, mime_type="application/json")]


def build_server(nexus: Nexus) -> tuple[NexusMCP, Watchers]:
    bus = InMemorySubscriptionBus()
    server = NexusMCP(
        nexus,
        name="nexus",
        title="Nexus",
        instructions=INSTRUCTIONS,
        version=_version(),
        subscriptions=bus,
        log_level="WARNING",
    )
    register_tools(server, nexus)
    register_resources(server, nexus)
    register_prompts(server)
    watchers = Watchers(nexus, bus)
    server._lowlevel_server.add_request_handler(  # the SDK's own handler, wrapped
        "subscriptions/listen",
        SubscriptionsListenRequestParams,
        listen_handler(watchers, ListenHandler(bus)),
    )
    subscribe, unsubscribe = legacy_handlers(watchers)
    server._lowlevel_server.add_request_handler(
        "resources/subscribe", SubscribeRequestParams, subscribe
    )
    server._lowlevel_server.add_request_handler(
        "resources/unsubscribe", UnsubscribeRequestParams, unsubscribe
    )
    return server, watchers


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nexus-cli")
    except PackageNotFoundError:
        return "0"
