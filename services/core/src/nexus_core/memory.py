"""Asking memory for context over request/reply, with a bounded wait.

A run never waits long for memory and never fails because of it: no responder, a timeout or a
bad reply give an empty context whose `status` says what happened.
"""

from __future__ import annotations

import logging

import nats.errors
from nats.aio.client import Client
from nexus_events.contract.subjects import MEMORY_SEARCH
from nexus_events.events import (
    GLOBAL_SCOPE,
    MemoryContext,
    MemorySearchReply,
    MemorySearchRequest,
    RunRequested,
    ScopeKind,
    scope_token,
)
from pydantic import ValidationError

log = logging.getLogger(__name__)

# nats.micro puts this header on error replies.
_SERVICE_ERROR = "Nats-Service-Error"


def memory_query(request: RunRequested) -> MemorySearchRequest:
    """What to search for: the request's input (or task) in the scopes the run belongs to
    (its agent, its task, its repository) and the global one; current memories only."""
    scopes = [scope_token(ScopeKind.AGENT, request.agent_id)]
    if request.task_id:
        scopes.append(scope_token(ScopeKind.TASK, request.task_id))
    if request.repo is not None:
        scopes.append(scope_token(ScopeKind.REPO, request.repo.url))
    scopes.append(GLOBAL_SCOPE)
    text = request.input or request.task_id or request.agent_id
    return MemorySearchRequest(query=text, scopes=scopes, strict=True)


class MemoryClient:
    """`search` returns a MemoryContext within `timeout` seconds, whatever memory does."""

    def __init__(self, nc: Client, *, timeout: float = 0.3, enabled: bool = True) -> None:
        self.nc = nc
        self.timeout = timeout
        self.enabled = enabled

    async def search(self, request: RunRequested) -> MemoryContext:  # noqa: PLR0911 - one per outcome
        if not self.enabled:
            return MemoryContext(status="disabled")
        body = memory_query(request).model_dump_json().encode()
        try:
            reply = await self.nc.request(MEMORY_SEARCH, body, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            return MemoryContext(status="unavailable")
        except nats.errors.TimeoutError:
            return MemoryContext(status="timeout")
        except nats.errors.Error as exc:
            log.warning("memory search failed: %s", exc)
            return MemoryContext(status="unavailable")
        if reply.headers and _SERVICE_ERROR in reply.headers:
            log.warning("memory search error reply: %s", reply.headers[_SERVICE_ERROR])
            return MemoryContext(status="unavailable")
        try:
            items = MemorySearchReply.model_validate_json(reply.data).items
        except ValidationError as exc:
            log.warning("memory search reply unreadable: %s", exc)
            return MemoryContext(status="unavailable")
        return MemoryContext(status="ok" if items else "empty", items=items)
