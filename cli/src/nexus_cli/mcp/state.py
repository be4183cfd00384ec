"""The server's shared state: where Nexus is, who is calling, and each caller's NATS connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from mcp.server.mcpserver import Context

from nexus_cli.client import Session
from nexus_cli.mcp.auth import Identity, Tokens
from nexus_cli.target import Target


@dataclass
class Nexus:
    """`session`: the server's own connection (stdio: the person running it). HTTP callers
    whose token names a `nats_user` get a connection of their own, opened on first use."""

    target: Target
    timeout: float
    session: Session
    local: Identity
    tokens: Tokens | None = None
    _sessions: dict[str, Session] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def identity(self, ctx: Context | None) -> Identity:
        """The caller: the token on this HTTP request, else (stdio) the local user. The HTTP
        middleware already refused requests without a valid token."""
        return self.identity_of(ctx.headers if ctx is not None else None)

    def identity_of(self, headers: Mapping[str, str] | None) -> Identity:
        """The caller of a request with these HTTP `headers` (None: stdio, the local user)."""
        if headers is None or self.tokens is None:
            return self.local
        found = self.tokens.from_header(headers.get("authorization"))
        if found is None:  # only reachable if the middleware were bypassed
            raise PermissionError("no valid bearer token")
        return found

    async def session_for(self, who: Identity) -> Session:
        if who.nats_user is None:
            return self.session
        async with self._lock:
            existing = self._sessions.get(who.name)
            if existing is not None:
                return existing
            session = Session(
                self.target,
                self.timeout,
                user=who.nats_user,
                password=who.nats_password,
                name=f"nexus-mcp:{who.name}",
                persistent=True,
            )
            await session.__aenter__()
            self._sessions[who.name] = session
            return session

    async def close(self) -> None:
        for session in self._sessions.values():
            with contextlib.suppress(Exception):
                await session.__aexit__(None, None, None)
        self._sessions.clear()
