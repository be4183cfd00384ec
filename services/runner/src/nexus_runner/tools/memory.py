"""The `remember` tool: a run writes long-term memory through the memory service.

The memory service is the only writer of NEXUS_MEMORY (it runs the secret guard first), so the
tool asks it over request/reply (``nexus.memory.v1.record``) with a bounded wait. A model may
write only into the scopes of its own run: its agent (the default), its task, its repository,
or global; anything else is refused before a request is sent. Nothing here raises past the
tool: a secret, a refusal or an absent memory service is a `ToolError` the model reads, and
the run goes on.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client
from nexus_events.contract.subjects import MEMORY_RECORD
from nexus_events.errors import InvalidSubject
from nexus_events.events import (
    GLOBAL_SCOPE,
    MemoryRecordReply,
    MemoryRecordRequest,
    RunConfig,
    ScopeKind,
    parse_scope,
    scope_token,
)
from nexus_events.events.queries import QueryErrorReply
from pydantic import ValidationError

from nexus_runner.errors import ToolError
from nexus_runner.tools.args import RememberArgs

# nats.micro puts these headers on error replies.
_SERVICE_ERROR = "Nats-Service-Error"
_SERVICE_ERROR_CODE = "Nats-Service-Error-Code"
UNAVAILABLE = "memory is unavailable"


@dataclass(frozen=True)
class RunScopes:
    """The scopes a run may write: its agent's, its task's, its repository's, and global."""

    agent_id: str
    task_id: str | None = None
    repo: str | None = None

    @classmethod
    def of(cls, config: RunConfig) -> RunScopes:
        return cls(config.agent_id, config.task_id, config.repo.url if config.repo else None)

    def own(self) -> dict[ScopeKind, str]:
        """Scope kind -> this run's token of it (kinds the run has no id for are absent)."""
        idents = {
            ScopeKind.AGENT: self.agent_id,
            ScopeKind.TASK: self.task_id,
            ScopeKind.REPO: self.repo,
        }
        out = {ScopeKind.GLOBAL: GLOBAL_SCOPE}
        for kind, ident in idents.items():
            if ident:
                try:
                    out[kind] = scope_token(kind, ident)
                except InvalidSubject:  # an id no scope token can hold: that scope is closed
                    continue
        return out

    def resolve(self, requested: str | None) -> str:
        """The scope token `requested` names, if it is one of this run's; `ToolError` if not.

        ``None`` means the run's agent; a bare kind (``agent``, ``task``, ``repo``,
        ``global``) means the run's own scope of that kind; a full scope (``task:<id>``,
        ``repo:<url>``, or a token) must be the run's own."""
        own = self.own()
        text = (requested or ScopeKind.AGENT.value).strip()
        if text in {k.value for k in ScopeKind}:
            kind = ScopeKind(text)
            if kind not in own:
                raise ToolError(f"this run has no {kind.value}; use one of: {self._choices(own)}")
            return own[kind]
        try:
            token = parse_scope(text)
        except InvalidSubject as exc:
            raise ToolError(f"{exc}; use one of: {self._choices(own)}") from None
        if token not in own.values():
            raise ToolError(
                f"scope {text!r} is outside this run: a run may only remember for its own"
                f" agent, task or repository, or globally; use one of: {self._choices(own)}"
            )
        return token

    @staticmethod
    def _choices(own: dict[ScopeKind, str]) -> str:
        return ", ".join(k.value for k in ScopeKind if k in own)


def memory_id_for(run_id: str, call_id: str) -> str:
    """The id a run's `remember` call records under: derived from the run and the tool call,
    so a repeated call (a retry, a redelivered turn) records one memory, not two."""
    digest = hashlib.blake2b(f"{run_id}\x00{call_id}".encode(), digest_size=10).hexdigest()
    return f"mem-{digest}"


class RunMemory:
    """One run's access to memory: `remember` records with a bounded wait, or raises
    `ToolError` saying why nothing (or maybe nothing) was recorded."""

    def __init__(self, nc: Client, run_id: str, scopes: RunScopes, *, timeout: float) -> None:
        self.nc = nc
        self.run_id = run_id
        self.scopes = scopes
        self.timeout = timeout

    async def remember(self, args: RememberArgs, call_id: str) -> str:
        scope = self.scopes.resolve(args.scope)
        try:
            request = MemoryRecordRequest(
                text=args.text,
                scope=scope,
                kind=args.kind,
                tags=args.tags,
                key=args.key,
                source="tool",
                source_run_id=self.run_id,
                # Without a call id there is nothing stable to derive from: a fresh id.
                memory_id=memory_id_for(self.run_id, call_id or uuid.uuid4().hex),
            )
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "arguments"
            raise ToolError(f"not remembered: {where}: {first['msg']}") from None
        reply = await self._record(request)
        text = f"remembered as {reply.memory_id} (scope {reply.scope})"
        if reply.redacted:
            text += "; secrets were redacted from it: " + ", ".join(reply.findings)
        return text

    async def _record(self, request: MemoryRecordRequest) -> MemoryRecordReply:
        body = request.model_dump_json(exclude_none=True).encode()
        try:
            msg = await self.nc.request(MEMORY_RECORD, body, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            raise ToolError(
                f"{UNAVAILABLE} (no memory service answers); nothing was recorded"
            ) from None
        except nats.errors.TimeoutError:
            raise ToolError(
                f"{UNAVAILABLE} (no answer within {self.timeout:g}s); it may not have been recorded"
            ) from None
        except nats.errors.Error as exc:
            raise ToolError(f"{UNAVAILABLE} ({type(exc).__name__}); nothing was recorded") from None
        headers = msg.headers or {}
        if _SERVICE_ERROR in headers or _SERVICE_ERROR_CODE in headers:
            raise ToolError(_error_text(headers, msg.data))
        try:
            return MemoryRecordReply.model_validate_json(msg.data)
        except ValidationError:
            raise ToolError(f"{UNAVAILABLE} (an unreadable reply)") from None


def _error_text(headers: dict[str, str], data: bytes) -> str:
    """What the model reads of an error reply: a refusal (400, 422: the secret guard) in the
    service's words; anything else is memory being unavailable."""
    try:
        detail = QueryErrorReply.model_validate_json(data).error
        code, message = detail.code, detail.message
    except ValidationError:
        raw = headers.get(_SERVICE_ERROR_CODE, "")
        code = int(raw) if raw.isdigit() else 500
        message = headers.get(_SERVICE_ERROR, "error")
    if 400 <= code < 500:  # the request's fault: the model can do otherwise
        return f"not remembered: {message}"
    return f"{UNAVAILABLE} ({message}); nothing was recorded"
