"""Memory events (``nexus.memory.v1.<scope>.<event>``) and the search query/reply bodies."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from nexus_events.events.base import Event, register
from nexus_events.events.runs import MemoryItem
from nexus_events.subjects import Family


@register
class MemoryRecorded(Event):
    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "recorded"

    memory_id: str = Field(..., description="Id of the memory.")
    text: str = Field(..., min_length=1, description="What to remember (secret-free).")
    kind: str = Field("fact", description="fact, decision, preference, ...")
    tags: list[str] = Field(default_factory=list, description="Tags.")
    source_run_id: str | None = Field(None, description="Run that learned it.")


@register
class MemoryForgotten(Event):
    event_family: ClassVar[Family] = Family.MEMORY
    event_name: ClassVar[str] = "forgotten"

    memory_id: str = Field(..., description="Id of the memory.")
    reason: str = Field("", description="Why it was forgotten.")


class MemorySearchRequest(BaseModel):
    """Body of a ``nexus.memory.v1.search`` request."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    query: str = Field(..., description="What the run is about.")
    scopes: list[str] = Field(default_factory=list, description="Scopes to search (agent, task).")
    limit: int = Field(8, gt=0, le=100, description="Most items to return.")


class MemorySearchReply(BaseModel):
    """Reply to a ``nexus.memory.v1.search`` request."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    items: list[MemoryItem] = Field(default_factory=list, description="Best matches first.")
