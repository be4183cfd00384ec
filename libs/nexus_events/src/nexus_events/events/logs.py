"""Runner log lines and LLM deltas (``nexus.agent.log.v1.<run_id>``): short-lived, size-capped."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Event, register


@register
class LogLine(Event):
    event_family: ClassVar[Family] = Family.LOG
    event_name: ClassVar[str] = "line"

    type: Literal["line"] = Field("line", description="Message kind.")
    seq: int = Field(..., ge=0, description="Line counter within the run.")
    stream: Literal["stdout", "stderr", "llm_text", "llm_reasoning", "runner"] = Field(
        "runner", description="Where the text comes from."
    )
    text: str = Field(..., description="The text (secrets redacted).")
    turn: int | None = Field(None, description="Turn it belongs to.")
