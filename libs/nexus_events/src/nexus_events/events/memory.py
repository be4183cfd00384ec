"""Memory: events (``nexus.memory.v1.<scope>.<event>``), scopes, and the memory service's
request/reply bodies.

Every memory lives in one scope, the subject token of its events: ``agent-<agent_id>``,
``task-<task_id>``, ``repo-<slug>`` (a repository or project) or ``global``. The memory
service (`services/memory`) is the writer: it guards every text against secrets before an
event is published, so a CLI, a run's `remember` tool or an extraction asks it to record
(``nexus.memory.v1.record``) rather than publishing here directly.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nexus_events.contract.subjects import Family, validate_token
from nexus_events.errors import InvalidSubject
from nexus_events.events.base import Event, register
from nexus_events.events.runs import MemoryItem

# Longest memory text: a memory is a fact or a decision, not a document.
MAX_MEMORY_TEXT = 4000
GLOBAL_SCOPE = "global"


class ScopeKind(StrEnum):
    AGENT = "agent"
    TASK = "task"
    REPO = "repo"
    GLOBAL = "global"


_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def repo_slug(repo: str) -> str:
    """A subject-safe name of a repository or project: ``https://github.com/acme/app.git``
    becomes ``github-com-acme-app``; a long name keeps its start and gains a short digest."""
    text = repo.strip().lower()
    text = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text)  # scheme
    text = re.sub(r"^[^@/]*@", "", text)  # user@ (ssh form)
    text = text.removesuffix("/").removesuffix(".git")
    slug = _SLUG_UNSAFE.sub("-", text).strip("-") or "repo"
    if len(slug) > 100:
        digest = hashlib.blake2b(slug.encode(), digest_size=6).hexdigest()
        slug = f"{slug[:87]}-{digest}"
    return slug


def scope_token(kind: ScopeKind | str, ident: str | None = None) -> str:
    """The subject token of a scope: ``scope_token("agent", "implementer")`` is
    ``agent-implementer``; a repository is slugged (`repo_slug`); ``global`` takes no id."""
    try:
        kind = ScopeKind(kind)
    except ValueError:
        raise InvalidSubject(
            f"invalid memory scope kind {kind!r}: must be agent, task, repo or global"
        ) from None
    if kind is ScopeKind.GLOBAL:
        if ident:
            raise InvalidSubject("the global memory scope takes no id")
        return GLOBAL_SCOPE
    if not ident:
        raise InvalidSubject(f"memory scope {kind.value} needs an id, e.g. {kind.value}:<id>")
    if kind is ScopeKind.REPO:
        ident = repo_slug(ident)
    return validate_token(f"{kind.value}-{ident}", "memory scope")


def parse_scope(text: str) -> str:
    """A scope as people write it (``agent:implementer``, ``repo:github.com/acme/app``,
    ``global``) or as a token (``agent-implementer``), as its token; `InvalidSubject` if
    neither."""
    text = text.strip()
    kind, sep, ident = text.partition(":")
    if sep:
        return scope_token(kind, ident)
    if text == GLOBAL_SCOPE:
        return text
    kind, sep, ident = text.partition("-")
    if sep and kind in {k.value for k in ScopeKind} and ident:
        return validate_token(text, "memory scope")
    raise InvalidSubject(
        f"invalid memory scope {text!r}: use agent:<id>, task:<id>, repo:<url or name> or global"
    )


def scope_kind(token: str) -> ScopeKind:
    """The kind of a scope token (`parse_scope` output)."""
    if token == GLOBAL_SCOPE:
        return ScopeKind.GLOBAL
    return ScopeKind(token.partition("-")[0])


def _scope_list(values: list[str]) -> list[str]:
    try:
        return [parse_scope(v) for v in values]
    except InvalidSubject as exc:
        raise ValueError(str(exc)) from None


# -- events ----------------------------------------------------------------------------


@register
class MemoryRecorded(Event):
    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "recorded"

    memory_id: str = Field(..., description="Id of the memory.")
    text: str = Field(..., min_length=1, description="What to remember (secret-free).")
    kind: str = Field("fact", description="fact, decision, preference, ...")
    tags: list[str] = Field(default_factory=list, description="Tags.")
    source_run_id: str | None = Field(None, description="Run that learned it.")
    key: str | None = Field(
        None,
        description="Topic key: a newer memory with the same key in the same scope supersedes"
        " this one (e.g. 'test-command').",
    )
    supersedes: list[str] = Field(
        default_factory=list, description="Memory ids this one replaces (an update)."
    )
    source: str = Field(
        "manual", description="How it came: manual, tool, extraction, consolidation."
    )
    redacted: bool = Field(False, description="The secret guard redacted part of the text.")


@register
class MemoryForgotten(Event):
    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "forgotten"

    memory_id: str = Field(..., description="Id of the memory.")
    reason: str = Field("", description="Why it was forgotten.")


@register
class MemorySuperseded(Event):
    """A memory stops being current: kept as history (valid_to set), hidden in strict search."""

    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "superseded"

    memory_id: str = Field(..., description="The memory that is no longer current.")
    by_memory_id: str | None = Field(None, description="The memory that replaces it.")
    reason: str = Field(
        "updated", description="updated, duplicate, near_duplicate, contradicted, same_key."
    )


@register
class MemoryAccessed(Event):
    """Searches returned these memories (a batch, flushed every few seconds)."""

    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "accessed"

    counts: dict[str, int] = Field(..., description="memory_id -> times returned.")


@register
class MemoryConsolidated(Event):
    """One consolidation pass over a scope: what it marked stale, and what it superseded
    (the supersessions themselves are `superseded` events of the same pass)."""

    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "consolidated"

    pass_id: str = Field(..., description="Id of the pass.")
    stale: list[str] = Field(
        default_factory=list, description="Memories decayed to stale (old and unused)."
    )
    superseded: int = Field(0, ge=0, description="Memories the pass superseded.")
    through_seq: int = Field(
        0, ge=0, description="The pass compared memories recorded up to this stream sequence."
    )


@register
class MemoryExtracted(Event):
    """Extraction after a run finished: marks the run done, whatever it found."""

    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "extracted"

    run_id: str = Field(..., description="The run memories were extracted from.")
    memory_ids: list[str] = Field(default_factory=list, description="Memories recorded.")
    blocked: int = Field(0, ge=0, description="Candidates the secret guard blocked.")
    model: str | None = Field(None, description="Model asked.")
    status: Literal["recorded", "nothing", "failed"] = Field(
        "recorded", description="recorded, nothing (nothing worth keeping), failed."
    )
    error: str | None = Field(None, description="Why extraction failed.")


# -- requests and replies (nexus-memory micro service) ----------------------------------


class _Request(BaseModel):
    # Requests are typed by people too (`nats req`): a misspelt field is an error.
    model_config = ConfigDict(frozen=True, extra="forbid")


class MemorySearchRequest(BaseModel):
    """Body of a ``nexus.memory.v1.search`` request."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    query: str = Field(..., description="What the run is about.")
    scopes: list[str] = Field(
        default_factory=list,
        description="Scopes to search (agent:<id>, task:<id>, repo:<name>, global, or tokens);"
        " at least one.",
    )
    limit: int = Field(8, gt=0, le=100, description="Most items to return.")
    strict: bool = Field(True, description="Only current memories: no superseded or stale items.")
    kinds: list[str] = Field(default_factory=list, description="Only these kinds (all if empty).")

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        return _scope_list(value)


class MemorySearchReply(BaseModel):
    """Reply to a ``nexus.memory.v1.search`` request."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    items: list[MemoryItem] = Field(default_factory=list, description="Best matches first.")


class MemoryRecordRequest(_Request):
    """Body of ``nexus.memory.v1.record``: guard the text, then record it."""

    text: str = Field(..., min_length=1, max_length=MAX_MEMORY_TEXT, description="The memory.")
    scope: str = Field(..., description="agent:<id>, task:<id>, repo:<name>, global.")
    kind: str = Field(
        "fact", pattern=r"^[a-z][a-z0-9_-]{0,31}$", description="fact, decision, preference..."
    )
    tags: list[str] = Field(default_factory=list, max_length=20, description="Tags.")
    key: str | None = Field(None, max_length=200, description="Topic key (see MemoryRecorded).")
    supersedes: list[str] = Field(default_factory=list, description="Memory ids it replaces.")
    source_run_id: str | None = Field(None, description="Run that learned it.")
    source: Literal["manual", "tool", "extraction", "consolidation"] = Field(
        "manual", description="Who asks."
    )
    memory_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,128}$",
        description="Id to record under (idempotent retries); generated when absent.",
    )

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        return _scope_list([value])[0]


class MemoryRecordReply(BaseModel):
    """The memory as recorded (after the secret guard)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: str
    scope: str
    redacted: bool = Field(False, description="Part of the text was redacted.")
    findings: list[str] = Field(default_factory=list, description="Secret kinds found.")


class MemoryForgetRequest(_Request):
    """Body of ``nexus.memory.v1.forget``: the memory stops being found (history is kept)."""

    memory_id: str = Field(..., pattern=r"^[A-Za-z0-9_-]{1,128}$")
    reason: str = Field("", max_length=500)


class MemoryForgetReply(BaseModel):
    """The memory forgotten and its scope."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: str
    scope: str


class MemoryListRequest(_Request):
    """Body of ``nexus.memory.v1.list``: stored memories, newest first."""

    scopes: list[str] = Field(default_factory=list, description="Scopes (all if empty).")
    include_history: bool = Field(False, description="Also superseded, stale and forgotten.")
    limit: int = Field(50, gt=0, le=500)
    cursor: int | None = Field(None, ge=0, description="next_cursor of the previous page.")

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        return _scope_list(value)


class MemoryView(BaseModel):
    """One stored memory as `list` shows it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: str
    scope: str
    kind: str
    text: str
    tags: list[str] = Field(default_factory=list)
    key: str | None = None
    source: str = "manual"
    source_run_id: str | None = None
    status: Literal["current", "superseded", "stale", "forgotten"] = "current"
    superseded_by: str | None = None
    access_count: int = 0
    recorded_at: str | None = None
    valid_to: str | None = None


class MemoryListReply(BaseModel):
    """One page of memories."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    items: list[MemoryView] = Field(default_factory=list)
    next_cursor: int | None = None


class MemoryConsolidateRequest(_Request):
    """Body of ``nexus.memory.v1.consolidate``: run a consolidation pass now."""

    scopes: list[str] = Field(default_factory=list, description="Scopes (all if empty).")

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        return _scope_list(value)


class MemoryConsolidateReply(BaseModel):
    """What the pass changed."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    scopes: int = 0
    superseded: int = 0
    stale: int = 0


class MemoryRebuildRequest(_Request):
    """Body of ``nexus.memory.v1.rebuild``: replay NEXUS_MEMORY into fresh tables, swap."""


class MemoryRebuildReply(BaseModel):
    """Events applied, time taken, and the embedder the tables now hold."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    applied: int
    seconds: float
    embedder: str
    dimension: int
